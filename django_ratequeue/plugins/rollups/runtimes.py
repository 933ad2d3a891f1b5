"""Read a queue's mean run time from its rollups: what the eta asks (engine/hooks.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import F, Sum

from django_ratequeue.plugins.rollups.models import (
    HISTOGRAM_BUCKETS,
    QueueMinute,
    QueueTotal,
    bucket_field,
)

# The recent minutes of a queue's rollups whose run times make its mean run time.
RUN_TIME_WINDOW = timedelta(minutes=15)

# The sums that make a mean run time: the milliseconds, and the samples (every bucket).
RUN_SUMS: dict[str, Any] = {
    "run_ms": Sum("run_ms"),
    "samples": Sum(
        sum(
            (F(bucket_field("run", bucket)) for bucket in range(1, HISTOGRAM_BUCKETS)),
            F(bucket_field("run", 0)),
        )
    ),
}


def mean_run_time(sums: dict[str, Any]) -> float | None:
    """Return the mean run time in seconds from :data:`RUN_SUMS` (None: no sample)."""
    samples = sums.get("samples") or 0
    if samples <= 0:
        return None
    return float(sums["run_ms"] or 0) / samples / 1000


def run_time(queue: str, now: datetime) -> float | None:
    """Return the mean run time of ``queue``'s attempts at ``now``, in seconds (None: none ran).

    From its rollups of the last RUN_TIME_WINDOW, else its totals since first counted."""
    since = now.astimezone(UTC).replace(second=0, microsecond=0) - RUN_TIME_WINDOW
    recent = QueueMinute.objects.filter(queue=queue, minute__gte=since)
    mean = mean_run_time(recent.aggregate(**RUN_SUMS))
    if mean is None:
        mean = mean_run_time(QueueTotal.objects.filter(queue=queue).aggregate(**RUN_SUMS))
    return mean

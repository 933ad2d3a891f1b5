"""Read the per-minute figures the loop keeps as series, sums and percentiles."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import NotSupportedError
from django.db.models import F, Func, IntegerField, Sum

from django_ratequeue.jobs import distinct_values
from django_ratequeue.models import queue_connection
from django_ratequeue.plugins.rollups.counting import floor_minute
from django_ratequeue.plugins.rollups.models import (
    BUCKET_FIELDS,
    COUNT_FIELDS,
    HISTOGRAM_BOUNDS,
    HISTOGRAM_BUCKETS,
    QueueMinute,
    QueueTotal,
    bucket_field,
)

# The most points one series may have (a day by the minute is 1,440).
MAX_POINTS = 10_000
PERCENTILES = (0.50, 0.95, 0.99)
WAIT_FIELDS = tuple(bucket_field("wait", bucket) for bucket in range(HISTOGRAM_BUCKETS))
RUN_FIELDS = tuple(bucket_field("run", bucket) for bucket in range(HISTOGRAM_BUCKETS))


@dataclass(frozen=True)
class Figures:
    """One point of a series: a minute, or several minutes summed (``start`` is the first).

    Percentiles are in seconds, None when no sample fell in the point."""

    start: datetime
    enqueued: int
    started: int
    completed: int
    failed: int
    retried: int
    canceled: int
    wait_p50: float | None
    wait_p95: float | None
    wait_p99: float | None
    run_p50: float | None
    run_p95: float | None
    run_p99: float | None
    tokens_reserved: int
    tokens_spent: int


def percentile(buckets: list[int], fraction: float) -> float | None:
    """Return the ``fraction`` percentile (nearest rank) of a histogram's samples, in seconds.

    It is read in the bucket holding that rank, at the rank's place between the bucket's
    bounds (on a log scale; linear in the first bucket, the lower bound in the open last
    one). None if the histogram is empty.
    """
    return percentiles(buckets, (fraction,))[0]


def percentiles(buckets: list[int], fractions: tuple[float, ...]) -> list[float | None]:
    """Return each of ``fractions`` (ascending) as :func:`percentile` reads it, in one walk.

    One walk of the histogram for them all (a day's dashboard reads thousands)."""
    total = sum(buckets)
    if not total:
        return [None] * len(fractions)
    ranks = [max(1, math.ceil(fraction * total)) for fraction in fractions]
    found: list[float | None] = []
    below = 0
    for index, count in enumerate(buckets):
        while len(found) < len(ranks) and below + count >= ranks[len(found)]:
            # Strictly inside the bucket, so the value maps back to it.
            place = (ranks[len(found)] - below - 0.5) / count
            if index == 0:
                found.append(HISTOGRAM_BOUNDS[0] * place)
            elif index == len(HISTOGRAM_BOUNDS):
                found.append(HISTOGRAM_BOUNDS[index - 1])
            else:
                low = HISTOGRAM_BOUNDS[index - 1]
                found.append(low * (HISTOGRAM_BOUNDS[index] / low) ** place)
        if len(found) == len(ranks):
            return found
        below += count
    raise AssertionError("unreachable: the ranks add up to the total")


def _figures(start: datetime, sums: dict[str, int]) -> Figures:
    wait_p50, wait_p95, wait_p99 = percentiles([sums[f] for f in WAIT_FIELDS], PERCENTILES)
    run_p50, run_p95, run_p99 = percentiles([sums[f] for f in RUN_FIELDS], PERCENTILES)
    return Figures(
        start=start,
        enqueued=sums["enqueued"],
        started=sums["started"],
        completed=sums["completed"],
        failed=sums["failed"],
        retried=sums["retried"],
        canceled=sums["canceled"],
        wait_p50=wait_p50,
        wait_p95=wait_p95,
        wait_p99=wait_p99,
        run_p50=run_p50,
        run_p95=run_p95,
        run_p99=run_p99,
        tokens_reserved=sums["tokens_reserved"],
        tokens_spent=sums["tokens_spent"],
    )


def _points(since: datetime, until: datetime, step: timedelta) -> tuple[datetime, int]:
    """Return the first point's start and the number of points of a series (:func:`series`)."""
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("series() needs aware datetimes.")
    seconds = step.total_seconds()
    if seconds <= 0 or seconds % 60:
        raise ValueError(f"The step must be a positive whole number of minutes, not {step}.")
    if until < since:
        raise ValueError("until is before since.")
    width = int(seconds)
    first = int(floor_minute(since).timestamp()) // width * width
    last = int(floor_minute(until).timestamp()) // width * width
    points = (last - first) // width + 1
    if points > MAX_POINTS:
        raise ValueError(f"{points} points asked for; at most {MAX_POINTS} per series.")
    return datetime.fromtimestamp(first, UTC), points


class _Point(Func):
    """Compute the index of the point a per-minute row falls in, so that SQL sums by point.

    The index is whole steps of ``width`` seconds from ``first`` (both in seconds since
    the epoch), so that a series is summed by point in SQL. Epoch arithmetic is the one
    thing the two databases spell differently."""

    output_field = IntegerField()

    def __init__(self, minute: Any, first: int, width: int) -> None:
        super().__init__(minute)
        self.first, self.width = first, width

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[Any, ...]]:
        minute, params = compiler.compile(self.source_expressions[0])
        if connection.vendor == "postgresql":
            seconds = f"EXTRACT(EPOCH FROM {minute})::bigint"
        elif connection.vendor == "sqlite":
            # '%%s' is strftime's '%s' once the backend has put its '?' in.
            seconds = f"CAST(strftime('%%s', {minute}) AS INTEGER)"
        else:
            raise NotSupportedError(f"Series are not read on {connection.vendor}.")
        return f"(({seconds} - %s) / %s)", (*params, self.first, self.width)


def _series(
    queues: Collection[str] | None, since: datetime, until: datetime, step: timedelta
) -> dict[str | None, list[Figures]]:
    """Return the series of each of ``queues`` (of all queues summed, under None, if None).

    One query, summing the minutes by point in SQL, one row per queue and point that has
    figures. See :func:`series`."""
    start, points = _points(since, until, step)
    width = int(step.total_seconds())
    rows = QueueMinute.objects.filter(minute__gte=start, minute__lt=start + step * points)
    group = ["point"]
    if queues is not None:
        rows = rows.filter(queue__in=list(queues))
        group = ["queue", "point"]
    fields = (*COUNT_FIELDS, *BUCKET_FIELDS)
    summed = (
        rows.annotate(point=_Point(F("minute"), int(start.timestamp()), width))
        .values(*group)
        .annotate(**{f"s_{f}": Sum(f) for f in fields})
        .values_list(*group, *(f"s_{f}" for f in fields))
        .order_by()
    )
    found: dict[str | None, dict[int, dict[str, int]]] = {
        queue: {} for queue in ([None] if queues is None else queues)
    }
    for row in summed:
        queue = row[0] if queues is not None else None
        point, *values = row[len(group) - 1 :]
        found[queue][point] = {f: v or 0 for f, v in zip(fields, values, strict=True)}
    zeros = dict.fromkeys(fields, 0)
    return {
        queue: [_figures(start + step * n, sums.get(n, zeros)) for n in range(points)]
        for queue, sums in found.items()
    }


def series_by_queue(
    queues: Collection[str],
    since: datetime,
    until: datetime,
    step: timedelta = timedelta(minutes=1),
) -> dict[str, list[Figures]]:
    """Return the series of each of ``queues``, as :func:`series` gives one, in one query.

    A dashboard charting several queues reads their points at once."""
    return {
        queue: points
        for queue, points in _series(queues, since, until, step).items()
        if queue is not None
    }


def series(
    queue: str | None,
    since: datetime,
    until: datetime,
    step: timedelta = timedelta(minutes=1),
) -> list[Figures]:
    """Return the figures of ``queue`` (all queues summed if None), one point per ``step``.

    ``step`` is a whole number of minutes; the points start at ``since`` floored to a
    multiple of ``step`` (since the epoch, UTC, so that points stay put from one refresh
    to the next) and go on while their start is at or before ``until``: the point holding
    ``until`` (the current, partial minute, when ``until`` is now) is the last. Points
    with nothing in them are zeros. One query, summing the minutes of each point in SQL:
    one row per point that has figures. ValueError for naive datetimes, a step that is
    not a positive whole number of minutes, ``until`` before ``since``, or more than
    MAX_POINTS points.
    """
    return _series(None if queue is None else [queue], since, until, step)[queue]


def by_queue(since: datetime, until: datetime) -> dict[str, Figures]:
    """Return each queue's figures summed over the minutes from ``since`` to ``until``.

    Both are floored to the minute, both included, for the queues that have any: one
    query, one row per queue. ``start`` is ``since``'s minute. ValueError as for
    :func:`series`."""
    start, minutes = _points(since, until, timedelta(minutes=1))
    fields = (*COUNT_FIELDS, *BUCKET_FIELDS)
    rows = (
        QueueMinute.objects.filter(
            minute__gte=start, minute__lt=start + timedelta(minutes=minutes)
        )
        .values("queue")
        .annotate(**{f"s_{f}": Sum(f) for f in fields})
        .values_list("queue", *(f"s_{f}" for f in fields))
        .order_by()
    )
    return {
        queue: _figures(start, dict(zip(fields, values, strict=True))) for queue, *values in rows
    }


def queues_with_figures(since: datetime) -> list[str]:
    """Return the queues with figures at ``since`` or later (its minute included), by name.

    One statement skipping through the (queue, minute) index, two probes per queue that
    has rows, rather than reading every row of the window (a day of minutes per queue).
    """
    connection = queue_connection()
    table = connection.ops.quote_name(QueueMinute._meta.db_table)
    queues = distinct_values("q", table, "queue")
    sql = (
        f"WITH RECURSIVE {queues} SELECT queue FROM q WHERE queue IS NOT NULL AND EXISTS ("
        f"SELECT 1 FROM {table} m WHERE m.queue = q.queue AND m.minute >= %s"
        f") ORDER BY queue"
    )
    minute = connection.ops.adapt_datetimefield_value(floor_minute(since))
    with connection.cursor() as cursor:
        cursor.execute(sql, [minute])
        return [name for (name,) in cursor.fetchall()]


def totals() -> dict[str, dict[str, int]]:
    """Return each queue's figures since it was first counted, by queue name.

    One read of :class:`..queue.models.QueueTotal`, a row per queue; the figures only
    grow, retention keeps them all."""
    fields = (*COUNT_FIELDS, *BUCKET_FIELDS)
    rows = QueueTotal.objects.order_by("queue").values_list("queue", *fields)
    return {queue: dict(zip(fields, values, strict=True)) for queue, *values in rows}

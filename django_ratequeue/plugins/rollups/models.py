"""The per-minute figures of each queue (the rollups' rows)."""

from __future__ import annotations

from django.db import models

from django_ratequeue.engine.models.cluster import SingletonRow

# The histograms' bucket bounds, in seconds: 1 ms doubling up to 2**22 ms (about 70 min).
# Bucket 0 holds the samples under 1 ms, bucket i (1 to 22) those in [bound i-1, bound i),
# and bucket 23 those of 2**22 ms and more. Fixed, so that any minutes' buckets add up.
HISTOGRAM_BOUNDS: tuple[float, ...] = tuple(0.001 * 2**k for k in range(23))
HISTOGRAM_BUCKETS = len(HISTOGRAM_BOUNDS) + 1
# The histograms a minute keeps, each as HISTOGRAM_BUCKETS columns named "<name>_h<i>".
HISTOGRAMS = ("wait", "run")
# Every column a rollup sums, in order: the counts, then the histograms' buckets.
COUNT_FIELDS = (
    "enqueued",
    "started",
    "completed",
    "failed",
    "retried",
    "canceled",
    "tokens_reserved",
    "tokens_spent",
    # Each histogram's samples summed, in milliseconds (Prometheus' _sum).
    "wait_ms",
    "run_ms",
)


def bucket_field(histogram: str, bucket: int) -> str:
    return f"{histogram}_h{bucket:02d}"


BUCKET_FIELDS = tuple(
    bucket_field(name, bucket) for name in HISTOGRAMS for bucket in range(HISTOGRAM_BUCKETS)
)
SUMMED_FIELDS = (*COUNT_FIELDS, *BUCKET_FIELDS)


class QueueMinute(models.Model):
    """What one queue did in one minute (UTC), kept by the loop as it moves jobs.

    :mod:`.rollups` tells what each figure counts. The dashboard's series read these rows,
    never the jobs table. Every figure is a sum, so minutes add up to hours and days;
    the wait and run times are histograms over :data:`HISTOGRAM_BOUNDS` (the ``wait_h<i>``
    and ``run_h<i>`` columns, added below) from which percentiles are read. Every figure
    has a database default of 0: the loop's UPSERT names only the ones it adds to."""

    queue = models.CharField(max_length=200)
    minute = models.DateTimeField(help_text="The minute's start, UTC.")
    enqueued = models.PositiveIntegerField(db_default=0)
    started = models.PositiveIntegerField(db_default=0)
    completed = models.PositiveIntegerField(db_default=0)
    failed = models.PositiveIntegerField(db_default=0)
    retried = models.PositiveIntegerField(db_default=0)
    canceled = models.PositiveIntegerField(db_default=0)
    tokens_reserved = models.PositiveBigIntegerField(db_default=0)
    tokens_spent = models.PositiveBigIntegerField(db_default=0)
    wait_ms = models.PositiveBigIntegerField(db_default=0)
    run_ms = models.PositiveBigIntegerField(db_default=0)

    class Meta:
        verbose_name = "queue minute"
        constraints = [
            # The loop's UPSERT conflicts on it; it also serves a queue's reads by range.
            models.UniqueConstraint(fields=["queue", "minute"], name="ratequeue_minute_queue")
        ]
        indexes = [
            # The reads over all queues by range, and retention.
            models.Index(fields=["minute"], name="ratequeue_minute_at"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} at {self.minute:%Y-%m-%d %H:%M}"


class QueueTotal(models.Model):
    """What one queue did since it was first counted: every figure of its minutes, summed.

    The loop adds to it in the statement after the one that adds to the minutes, in the
    same transaction, so a queue's totals only grow: retention prunes minutes, never
    totals. The Prometheus counters and histograms read these rows (one per queue)."""

    queue = models.CharField(max_length=200, unique=True)
    enqueued = models.PositiveBigIntegerField(db_default=0)
    started = models.PositiveBigIntegerField(db_default=0)
    completed = models.PositiveBigIntegerField(db_default=0)
    failed = models.PositiveBigIntegerField(db_default=0)
    retried = models.PositiveBigIntegerField(db_default=0)
    canceled = models.PositiveBigIntegerField(db_default=0)
    tokens_reserved = models.PositiveBigIntegerField(db_default=0)
    tokens_spent = models.PositiveBigIntegerField(db_default=0)
    wait_ms = models.PositiveBigIntegerField(db_default=0)
    run_ms = models.PositiveBigIntegerField(db_default=0)

    class Meta:
        verbose_name = "queue total"

    def __str__(self) -> str:
        return f"{self.queue} since first counted"


for _field in BUCKET_FIELDS:
    QueueMinute.add_to_class(_field, models.PositiveIntegerField(db_default=0))
    QueueTotal.add_to_class(_field, models.PositiveBigIntegerField(db_default=0))


class RollupCursor(SingletonRow):
    """Until when the rollups counted the arrivals (counting.py), in one row (pk 1).

    The jobs created before ``arrivals_until`` are counted in ``enqueued``; None: none
    yet, counting starts at the loop's next step."""

    arrivals_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "rollup cursor"

    def __str__(self) -> str:
        return f"arrivals counted until {self.arrivals_until}"

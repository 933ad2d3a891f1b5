"""Count each queue's per-minute figures (:class:`.models.QueueMinute`) as the loop moves jobs.

The series are read in :mod:`django_ratequeue.monitor.figures`. docs/concepts.md
("Rollups") tells what each figure counts, in which minute, and why times are histograms
over fixed log-scale buckets (:data:`.models.HISTOGRAM_BOUNDS`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, Model
from django.db.models.functions import TruncMinute

from django_ratequeue.engine.heads import LeaseHead, aware, register_lease_head
from django_ratequeue.engine.models import Job, Status, queue_connection
from django_ratequeue.engine.moves import Moves
from django_ratequeue.plugins.rollups.models import (
    HISTOGRAM_BOUNDS,
    SUMMED_FIELDS,
    QueueMinute,
    QueueTotal,
    RollupCursor,
    bucket_field,
)

# How long after its creation a job is counted in ``enqueued``: a producer's transaction
# that commits later than this after its enqueue is not counted (see Tally.count_arrivals).
ARRIVALS_SETTLE = timedelta(seconds=10)
# The most time of arrivals one step counts (a loop that was down catches up step by step).
ARRIVALS_WINDOW = timedelta(minutes=1)


def settled_until(now: datetime) -> datetime:
    """Return until when the arrivals are settled at ``now``.

    That is ARRIVALS_SETTLE ago, to the whole second before, so that the loop counts
    them once a second, not at every step."""
    return (now - ARRIVALS_SETTLE).replace(microsecond=0)


# The figure each final status counts in.
FINAL_FIGURES: dict[str, str] = {
    Status.COMPLETE.value: "completed",
    Status.FAILED.value: "failed",
    Status.CANCELED.value: "canceled",
}


def floor_minute(moment: datetime) -> datetime:
    """Return the UTC minute ``moment`` falls in."""
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def bucket_of(seconds: float) -> int:
    """Return the histogram bucket a duration falls in.

    A negative duration, from clocks that disagree, falls in the first."""
    return bisect_right(HISTOGRAM_BOUNDS, seconds)


def arrivals(since: datetime, until: datetime | None = None) -> list[tuple[str, datetime, int]]:
    """Return (queue, minute, jobs) for the jobs created in [since, until), by queue and minute.

    ``until`` None means until now. One read of the jobs' creation index over that
    range."""
    created = Job.objects.filter(created_at__gte=since)
    if until is not None:
        created = created.filter(created_at__lt=until)
    return list(
        created.annotate(arrival=TruncMinute("created_at", tzinfo=UTC))
        .values("queue", "arrival")
        .annotate(jobs=Count("pk"))
        .values_list("queue", "arrival", "jobs")
        .order_by()
    )


def counted_arrivals() -> datetime | None:
    """Return until when the rollups counted the arrivals (None: never yet)."""
    return (
        RollupCursor.objects.filter(pk=RollupCursor.SINGLETON)
        .values_list("arrivals_until", flat=True)
        .first()
    )


def cursor_sql(connection: BaseDatabaseWrapper) -> list[str]:
    """Return the SQL that reads until when the arrivals are counted, by the row's key."""
    table = connection.ops.quote_name(RollupCursor._meta.db_table)
    return [f"SELECT arrivals_until FROM {table} WHERE id = {RollupCursor.SINGLETON}"]


def read_cursor(values: Sequence[Any]) -> datetime | None:
    """Return the cursor the renewal read, aware (None: never counted yet)."""
    return None if values[0] is None else aware(values[0])


# Until when the rollups counted the arrivals, read by every step's lease renewal.
register_lease_head(LeaseHead("arrivals_until", cursor_sql, read_cursor))


@dataclass(frozen=True)
class ArrivalsWindow:
    """The arrivals a step counts: the jobs created in [``since``, ``until``).

    ``counted`` is the cursor as the step found it; ``behind`` says that more are
    settled beyond the window."""

    counted: datetime | None
    since: datetime
    until: datetime
    behind: bool

    @classmethod
    def at(cls, now: datetime, counted: datetime | None) -> ArrivalsWindow:
        """Return the window of a step at ``now``, the arrivals counted until ``counted``.

        A step counts at most ARRIVALS_WINDOW of arrivals: a loop that was down catches
        up in steps rather than in one long read."""
        settled = settled_until(now)
        since = settled if counted is None else counted
        until = max(since, min(settled, since + ARRIVALS_WINDOW))
        return cls(counted, since, until, until < settled)

    def record(self) -> None:
        """Move the cursor to ``until`` if it moved: one UPSERT, in the step's transaction."""
        if self.until == self.counted:
            return
        RollupCursor.objects.bulk_create(
            [RollupCursor(pk=RollupCursor.SINGLETON, arrivals_until=self.until)],
            update_conflicts=True,
            unique_fields=["id"],
            update_fields=["arrivals_until"],
        )


def uncounted_arrivals(since: datetime, now: datetime) -> dict[str, dict[datetime, int]]:
    """Return the jobs created at ``since`` or later that ``enqueued`` does not hold yet.

    They come by queue and minute of creation: the ones the loop counts ARRIVALS_SETTLE
    after their creation (from when it last counted; before its first step, from what
    that step would count from)."""
    counted = counted_arrivals() or now - ARRIVALS_SETTLE
    found: dict[str, dict[datetime, int]] = {}
    for queue, minute, jobs in arrivals(max(since, counted)):
        found.setdefault(queue, {})[minute] = jobs
    return found


class Tally:
    """Keep what one loop step did, per queue and minute, in memory until the step's end.

    It is written once at the step's end, in its transaction: a step rolled back counts
    nothing, and a step that did nothing writes nothing. The queues' totals
    (:class:`.models.QueueTotal`) take the same figures in the same transaction. Events
    count in the minute of the step's ``now``; arrivals in the minute their job was
    created."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.minute = floor_minute(now)
        self.rows: dict[tuple[str, datetime], Counter[str]] = {}

    def count(self, queue: str, figure: str, number: int = 1) -> None:
        if number:
            self.rows.setdefault((queue, self.minute), Counter())[figure] += number

    def final(self, queue: str, status: str) -> None:
        """Count a job of ``queue`` that reached the final ``status``."""
        self.count(queue, FINAL_FIGURES[str(status)])

    def wait(self, queue: str, ready_at: datetime) -> None:
        """Count an attempt of ``queue`` dispatched now, whose job was ready at ``ready_at``."""
        self.duration(queue, "wait", (self.now - ready_at).total_seconds())

    def run(self, queue: str, started_at: datetime, ended_at: datetime) -> None:
        """Count an attempt of ``queue`` that ran from ``started_at`` to ``ended_at``."""
        self.duration(queue, "run", (ended_at - started_at).total_seconds())

    def duration(self, queue: str, histogram: str, seconds: float) -> None:
        """Count a sample of ``histogram`` in its bucket and its sum (a negative one as 0)."""
        self.count(queue, bucket_field(histogram, bucket_of(seconds)))
        self.count(queue, f"{histogram}_ms", round(max(seconds, 0.0) * 1000))

    def record(self, moves: Moves) -> None:
        """Count what a step's transitions did, as ``moves`` reports it.

        That is the jobs started (with their wait and spent tokens), the reservations,
        the attempts that ran, the retries and the final statuses."""
        for job, ready_at in moves.started:
            self.count(job.queue, "started")
            self.wait(job.queue, ready_at)
            if job.tokens_reserved:
                self.count(job.queue, "tokens_spent", job.cost)
        for job in moves.reserved:
            self.count(job.queue, "tokens_reserved", job.cost)
        for job, attempt in moves.ran:
            assert attempt.started_at is not None and attempt.ended_at is not None
            self.run(job.queue, attempt.started_at, attempt.ended_at)
        for job in moves.retried:
            self.count(job.queue, "retried")
        for job in moves.finished:
            self.final(job.queue, job.status)

    def count_arrivals(self, since: datetime, until: datetime) -> None:
        """Count the jobs created in [since, until) in ``enqueued``, by queue and minute.

        Jobs count in the minute of their creation: one read of the jobs' creation index
        over that range. Producers pay nothing for it (no extra write, no shared row to
        lock). The loop moves ``until`` to ``ARRIVALS_SETTLE`` before its step, so a job
        is counted once, at the first step after it is that old; a job whose transaction
        commits later than that after its creation is missed (or, after a change of
        leader, counted late)."""
        if until <= since:
            return
        for queue, minute, jobs in arrivals(since, until):
            self.rows.setdefault((queue, minute), Counter())["enqueued"] += jobs

    def write(self) -> None:
        """Add the tally to the minutes, then to the queues' totals.

        An UPSERT each; on PostgreSQL both in one statement (a round trip fewer a step)."""
        if not self.rows:
            return
        totals: dict[tuple[str], Counter[str]] = {}
        for (queue, _minute), row in self.rows.items():
            totals.setdefault((queue,), Counter()).update(row)
        minutes, minute_params = upsert_sql(QueueMinute, ("queue", "minute"), self.rows)
        total, total_params = upsert_sql(QueueTotal, ("queue",), totals)
        statements = [(minutes, minute_params), (total, total_params)]
        connection = queue_connection()
        if connection.vendor == "postgresql":
            statements = [(f"WITH minutes AS ({minutes}) {total}", minute_params + total_params)]
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)


def upsert_sql(
    model: type[Model], keys: tuple[str, ...], rows: Mapping[tuple[Any, ...], Counter[str]]
) -> tuple[str, list[Any]]:
    """Return the UPSERT that adds each row's figures to ``model``'s row of the same ``keys``.

    The same on PostgreSQL and SQLite, with its parameters; a row not there yet starts
    from 0."""
    touched = [f for f in SUMMED_FIELDS if any(f in row for row in rows.values())]
    connection = queue_connection()
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(name) for name in [*keys, *touched])
    # The figures are ints the loop counted: inline, so only the keys take parameters.
    placeholders = ", ".join(["%s"] * len(keys))
    values = ", ".join(
        f"({placeholders}, {', '.join(str(int(row[f])) for f in touched)})"
        for row in rows.values()
    )
    added = ", ".join(f"{quote(f)} = {table}.{quote(f)} + excluded.{quote(f)}" for f in touched)
    conflict = ", ".join(quote(key) for key in keys)
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES {values}"
        f" ON CONFLICT ({conflict}) DO UPDATE SET {added}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    params = [
        adapt(value) if isinstance(value, datetime) else value for key in rows for value in key
    ]
    return sql, params

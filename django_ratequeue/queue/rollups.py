"""The per-minute figures of each queue (:class:`.models.QueueMinute`), and their series.

Kept by the loop as it moves jobs, so that a chart never scans the jobs table: a series
is summed by point in SQL (one row per queue and point, or per point over every queue),
however many jobs the table holds and however many minutes a point spans. What each
figure counts (docs/concepts.md, "Rollups"):

- ``enqueued``: jobs created (by producers, or by the loop for callbacks);
- ``started``: attempts the loop dispatched (a worker claims them a moment later);
- ``completed``, ``failed``, ``canceled``: jobs that reached that final status;
- ``retried``: attempts that ended and whose job was scheduled for another try;
- wait time: from the job being ready (enqueued, or its schedule or back-off due) to its
  attempt's dispatch; run time: from the attempt's start to its end, as its runner wrote;
- ``tokens_reserved``: cost drawn from a rate-gated queue's limit; ``tokens_spent``: the
  reserved cost of the attempts that started with it.

Each event counts in the minute of the loop step that saw it. Times are histograms over
fixed log-scale buckets (:data:`.models.HISTOGRAM_BOUNDS`: 1 ms doubling up to about
70 min), so minutes add up and a percentile read from a sum is within its bucket: at
worst a factor of 2 off, the bucket's geometric middle on average.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import NotSupportedError
from django.db.models import Count, F, Func, IntegerField, Sum
from django.db.models.functions import TruncMinute

from .models import (
    BUCKET_FIELDS,
    COUNT_FIELDS,
    HISTOGRAM_BOUNDS,
    HISTOGRAM_BUCKETS,
    SUMMED_FIELDS,
    Job,
    LoopState,
    QueueMinute,
    Status,
    bucket_field,
    queue_connection,
)
from .moves import Moves

# The most points one series may have (a day by the minute is 1,440).
MAX_POINTS = 10_000
PERCENTILES = (0.50, 0.95, 0.99)
WAIT_FIELDS = tuple(bucket_field("wait", bucket) for bucket in range(HISTOGRAM_BUCKETS))
RUN_FIELDS = tuple(bucket_field("run", bucket) for bucket in range(HISTOGRAM_BUCKETS))
# How long after its creation a job is counted in ``enqueued``: a producer's transaction
# that commits later than this after its enqueue is not counted (see Tally.count_arrivals).
ARRIVALS_SETTLE = timedelta(seconds=10)
# The most time of arrivals one step counts (a loop that was down catches up step by step).
ARRIVALS_WINDOW = timedelta(minutes=1)


def settled_until(now: datetime) -> datetime:
    """Until when the arrivals are settled at ``now``: ARRIVALS_SETTLE ago, to the whole
    second before, so that the loop counts them once a second, not at every step."""
    return (now - ARRIVALS_SETTLE).replace(microsecond=0)


# The figure each final status counts in.
FINAL_FIGURES: dict[str, str] = {
    Status.COMPLETE.value: "completed",
    Status.FAILED.value: "failed",
    Status.CANCELED.value: "canceled",
}


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


def floor_minute(moment: datetime) -> datetime:
    """The UTC minute ``moment`` falls in."""
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def percentile(buckets: list[int], fraction: float) -> float | None:
    """The ``fraction`` percentile (nearest rank) of a histogram's samples, in seconds: the
    bucket holding that rank, at the rank's place between the bucket's bounds (on a log
    scale; linear in the first bucket, the lower bound in the open last one). None if
    the histogram is empty."""
    return percentiles(buckets, (fraction,))[0]


def percentiles(buckets: list[int], fractions: tuple[float, ...]) -> list[float | None]:
    """Each of ``fractions`` (ascending) as :func:`percentile` reads it, in one walk of
    the histogram (a day's dashboard reads thousands)."""
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


def bucket_of(seconds: float) -> int:
    """The histogram bucket a duration falls in (a negative one, from clocks that
    disagree, in the first)."""
    return bisect_right(HISTOGRAM_BOUNDS, seconds)


def arrivals(since: datetime, until: datetime | None = None) -> list[tuple[str, datetime, int]]:
    """Return (queue, minute, jobs) for the jobs created in [since, until) (until now
    when None), by queue and minute of creation: one read of the jobs' creation index
    over that range."""
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
        LoopState.objects.filter(pk=LoopState.SINGLETON)
        .values_list("arrivals_until", flat=True)
        .first()
    )


def uncounted_arrivals(since: datetime, now: datetime) -> dict[str, dict[datetime, int]]:
    """Return the jobs created at ``since`` or later that ``enqueued`` does not hold yet,
    by queue and minute of creation: the ones the loop counts ARRIVALS_SETTLE after their
    creation (from when it last counted; before its first step, from what that step
    would count from)."""
    counted = counted_arrivals() or now - ARRIVALS_SETTLE
    found: dict[str, dict[datetime, int]] = {}
    for queue, minute, jobs in arrivals(max(since, counted)):
        found.setdefault(queue, {})[minute] = jobs
    return found


class Tally:
    """What one loop step did, per queue and minute, kept in memory and written once at
    the step's end, in its transaction: a step rolled back counts nothing, and a step that
    did nothing writes nothing. Events count in the minute of the step's ``now``; arrivals
    in the minute their job was created."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.minute = floor_minute(now)
        self.rows: dict[tuple[str, datetime], Counter[str]] = {}

    def count(self, queue: str, figure: str, number: int = 1) -> None:
        if number:
            self.rows.setdefault((queue, self.minute), Counter())[figure] += number

    def final(self, queue: str, status: str) -> None:
        """A job of ``queue`` reached the final ``status``."""
        self.count(queue, FINAL_FIGURES[str(status)])

    def wait(self, queue: str, ready_at: datetime) -> None:
        """An attempt of ``queue`` dispatched now, whose job was ready at ``ready_at``."""
        self.count(queue, bucket_field("wait", bucket_of((self.now - ready_at).total_seconds())))

    def run(self, queue: str, started_at: datetime, ended_at: datetime) -> None:
        """An attempt of ``queue`` that ran from ``started_at`` to ``ended_at``."""
        self.count(queue, bucket_field("run", bucket_of((ended_at - started_at).total_seconds())))

    def record(self, moves: Moves) -> None:
        """Count what a step's transitions did: the jobs started (with their wait and
        spent tokens), the reservations, the attempts that ran, the retries and the
        final statuses."""
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
        """Count the jobs created in [since, until) in ``enqueued``, by queue and minute of
        creation: one read of the jobs' creation index over that range.

        Producers pay nothing for it (no extra write, no shared row to lock). The loop
        moves ``until`` to ``ARRIVALS_SETTLE`` before its step, so a job is counted once,
        at the first step after it is that old; a job whose transaction commits later than
        that after its creation is missed (or, after a change of leader, counted late)."""
        if until <= since:
            return
        for queue, minute, jobs in arrivals(since, until):
            self.rows.setdefault((queue, minute), Counter())["enqueued"] += jobs

    def write(self) -> None:
        """Add the tally to the rollups in one UPSERT (PostgreSQL and SQLite alike)."""
        if not self.rows:
            return
        touched = [f for f in SUMMED_FIELDS if any(f in row for row in self.rows.values())]
        connection = queue_connection()
        quote = connection.ops.quote_name
        table = quote(QueueMinute._meta.db_table)
        columns = ", ".join(quote(name) for name in ["queue", "minute", *touched])
        # The figures are ints the loop counted: inline, so only the names take parameters.
        values = ", ".join(
            f"(%s, %s, {', '.join(str(int(row[f])) for f in touched)})"
            for row in self.rows.values()
        )
        added = ", ".join(
            f"{quote(f)} = {table}.{quote(f)} + excluded.{quote(f)}" for f in touched
        )
        sql = (
            f"INSERT INTO {table} ({columns}) VALUES {values}"
            f" ON CONFLICT ({quote('queue')}, {quote('minute')}) DO UPDATE SET {added}"
        )
        adapt = connection.ops.adapt_datetimefield_value
        params = [value for queue, minute in self.rows for value in (queue, adapt(minute))]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


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
    """The first point's start and the number of points of a series (see :func:`series`)."""
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
    """The index of the point a per-minute row falls in: whole steps of ``width`` seconds
    from ``first`` (both in seconds since the epoch), so that a series is summed by point
    in SQL. Epoch arithmetic is the one thing the two databases spell differently."""

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
    """The series of each of ``queues`` (of all queues summed, under None, when None):
    one query, summing the minutes by point in SQL, one row per queue and point that has
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
    """The series of each of ``queues``, as :func:`series` gives one, in one query: a
    dashboard charting several queues reads their points at once."""
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
    """The figures of ``queue`` (all queues summed if None), one point per ``step``.

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
    """Each queue's figures summed over the minutes from ``since`` to ``until`` (both
    floored to the minute, both included), for the queues that have any: one query, one
    row per queue. ``start`` is ``since``'s minute. ValueError as for :func:`series`."""
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
    """The queues with figures at ``since`` or later (its minute included), by name: one
    statement skipping through the (queue, minute) index, two probes per queue that has
    rows, rather than reading every row of the window (a day of minutes per queue)."""
    connection = queue_connection()
    table = connection.ops.quote_name(QueueMinute._meta.db_table)
    sql = (
        f"WITH RECURSIVE q(name) AS ("
        f" SELECT MIN(queue) FROM {table}"
        f" UNION ALL"
        f" SELECT (SELECT MIN(queue) FROM {table} m WHERE m.queue > q.name)"
        f" FROM q WHERE q.name IS NOT NULL"
        f") SELECT name FROM q WHERE name IS NOT NULL AND EXISTS ("
        f"SELECT 1 FROM {table} m WHERE m.queue = q.name AND m.minute >= %s"
        f") ORDER BY name"
    )
    minute = connection.ops.adapt_datetimefield_value(floor_minute(since))
    with connection.cursor() as cursor:
        cursor.execute(sql, [minute])
        return [name for (name,) in cursor.fetchall()]

"""The main loop: the only code that moves jobs between statuses, one step at a time.

The loop is led by one process at a time, which owns a ``generation`` of ``LoopState``
(:mod:`.agent` elects it). Each step is one transaction that renews the lease first:
recover lost attempts, apply cancels, finish ended attempts (:mod:`.transitions`), give
resuming waits their slots, promote due jobs, start what the limits allow
(:mod:`.dispatch`), signal the runners, ask django-q2 for more runners if too few
serve, and say whether the loop rests and until when. docs/concepts.md ("The queue
engine") tells the design: who writes which table, the statuses, the loop states and
the invariants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import clock
from ..conf import ratequeue_settings
from ..db import execute, server_statement
from .dispatch import Dispatch
from .models import (
    DEFERRED_STATUSES,
    Attempt,
    CancelRequest,
    Job,
    LoopState,
    LoopStatus,
    queue_connection,
    queue_db,
)
from .retention import prune_in_background
from .rollups import ARRIVALS_SETTLE, ARRIVALS_WINDOW, Tally, counted_arrivals, settled_until
from .transitions import STEP_LIMIT, apply_cancels, finish, promote_due, recover
from .wakeup import JOBS, WORK, lease_end, segment_ceiling, signal

# What a step's transaction tells PostgreSQL. It commits without waiting for the WAL
# flush: a crash may forget the step, never half of it, and whatever a runner then did
# with its attempts was flushed with the runner's own durable claim, which PostgreSQL
# writes after the step it depends on. And it plans its reads on indexes: every read of a
# step is made for one (the partial indexes of the active attempts, the dispatch index),
# which the planner would pass over for a sequential scan of the whole table while it has
# no statistics for it (before autovacuum's first ANALYZE, or without autovacuum). Plain
# index scans, not bitmap ones: a plain scan marks the index entries of rows gone (the
# attempts that ended, the jobs that started) dead as it passes them, so the next scans
# skip them; a bitmap scan reads them all again at every step until VACUUM removes them.
# A scan it cannot avoid (a small table without an index for the read) is then priced so
# high that PostgreSQL would compile it with JIT, which costs milliseconds: no JIT.
STEP_SETTINGS = (
    ("synchronous_commit", "off"),
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("jit", "off"),
)


class Loop:
    """The work of the leader, in steps; ``generation`` is the one it owns."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.settings = ratequeue_settings()
        self.dispatch = Dispatch(self.settings)
        self._last_recovery = 0.0
        # Set by a step: it hit a per-step limit (more_work), or left the loop resting,
        # and when the resting loop wants waking.
        self.more_work = False
        self.rested = False
        self.next_wake: datetime | None = None
        # The state and wake-up time the last step wrote.
        self.recorded: tuple[str, datetime | None] | None = None
        # The jobs created before this are counted in the rollups (LoopState.arrivals_until,
        # read at the pass's first step).
        self.arrivals_until: datetime | None = None
        # The creation of the first job not counted yet, as last read (None: not known).
        self.first_uncounted: datetime | None = None

    def run(self, seconds: float) -> bool:
        """Step until nothing is left to do now, for at most ``seconds``; False if this
        process lost the lease (another leads)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.step() is None:
                return False
            if self.rested or time.monotonic() > deadline:
                return True

    def step(self) -> bool | None:
        """One transaction of loop work; None if this process lost its generation."""
        now = clock.now()
        tally = Tally(now)
        with transaction.atomic(using=queue_db()):
            arrivals_since = self.arrivals_until
            if arrivals_since is None:
                arrivals_since = counted_arrivals() or settled_until(now)
            # At most a window of arrivals per step: a loop that was down catches up in
            # steps (more_work) rather than in one long read.
            settled = settled_until(now)
            arrivals_until = max(arrivals_since, min(settled, arrivals_since + ARRIVALS_WINDOW))
            renewed = renew_lease(self.generation, now, arrivals_until)
            if renewed is None:
                return None
            tally.count_arrivals(arrivals_since, arrivals_until)
            self.more_work = arrivals_until < settled
            did_work = self.recover(now)
            # Cancels before completions: a job canceled before the loop took in its
            # attempt's end ends CANCELED, whichever of the two reached the database first.
            if renewed.cancels_waiting:
                canceled, more_cancels = apply_cancels(now, tally)
                did_work |= canceled
                self.more_work |= more_cancels
            active = list(
                Attempt.objects.filter(active=True).only(
                    "job",
                    "queue",
                    "concurrency_key",
                    "ended_at",
                    "wait",
                    "wait_queue",
                    "worker",
                    "remote",
                )
            )
            ended = [a.pk for a in active if a.ended_at is not None]
            # The earliest start of a deferred job after this step (None: none).
            deferred = renewed.next_deferred
            if ended:
                self.more_work |= len(ended) > STEP_LIMIT
                retry_at = finish(ended[:STEP_LIMIT], now, tally)
                deferred = min(filter(None, [deferred, retry_at]), default=None)
                did_work = True
            running = [a for a in active if a.ended_at is None]
            self.dispatch.read_limits(renewed.max_concurrency)
            did_work |= self.dispatch.grant_resumes(running)
            if deferred is not None and deferred <= now:  # a retry due at once included
                promoted = promote_due(now)
                self.more_work |= promoted == STEP_LIMIT
                deferred = next_deferred_start()
                did_work |= bool(promoted)
            started, waiting_left = self.dispatch.start_ready(running, now, tally)
            running.extend(started)
            did_work |= bool(started)
            # Runners for the attempts started; the jobs' watchers (the HTTP API's event
            # streams) for the statuses this step may have changed. One statement.
            channels = [WORK] if started else []
            if did_work:
                channels.append(JOBS)
            signal(*channels)
            # Rest as soon as nothing is left to do right now, even after doing some work.
            self.rested = not (self.more_work or (started and waiting_left))
            state: str = LoopStatus.RUNNING
            wake: datetime | None = None
            if self.rested:
                state, wake = self.resting_state(
                    running, waiting_left, now, arrivals_until, deferred
                )
            self.next_wake = wake
            if (state, wake) != self.recorded:  # as the last step left it: nothing to write
                LoopState.objects.rest(state, wake)
                self.recorded = (state, wake)
            tally.write()
        self.arrivals_until = arrivals_until  # committed with the step
        if not did_work:
            prune_in_background()
        return did_work

    def recover(self, now: datetime) -> bool:
        """Recover lost and overrun attempts, at most once per WATCHDOG_INTERVAL."""
        if time.monotonic() - self._last_recovery < self.settings.WATCHDOG_INTERVAL:
            return False
        self._last_recovery = time.monotonic()
        return recover(now, timedelta(seconds=self.settings.WORKER_DEAD_AFTER))

    def first_uncounted_arrival(self, counted_until: datetime) -> datetime | None:
        """The creation of the first job the rollups have not counted yet, if any: read
        again only once that job is counted (a later one cannot wake the loop sooner)."""
        known = self.first_uncounted
        if known is None or known < counted_until:
            self.first_uncounted = known = first_arrival_since(counted_until)
        return known

    def resting_state(
        self,
        running: list[Attempt],
        waiting_left: bool,
        now: datetime,
        counted_until: datetime,
        deferred: datetime | None,
    ) -> tuple[str, datetime | None]:
        """The state a step leaves the loop in when nothing is left to do now, and when
        it wants waking: the next ``deferred`` start, rate-limit time, or recovery look."""
        wakes = [deferred] if deferred is not None else []
        wakes.extend(self.dispatch.wakes())
        # Count the jobs not counted yet, once they are settled.
        uncounted = self.first_uncounted_arrival(counted_until)
        if uncounted is not None:
            wakes.append(uncounted.replace(microsecond=0) + timedelta(seconds=1) + ARRIVALS_SETTLE)
        if running:
            # Look again for dead workers and overruns even if no completion arrives.
            wakes.append(now + timedelta(seconds=self.settings.WORKER_DEAD_AFTER))
        wake = segment_ceiling(min(wakes)) if wakes else None
        holding = sum(a.holds_environment_slot for a in running)
        if waiting_left and holding >= self.dispatch.max_concurrency:
            return LoopStatus.SATURATED, wake
        if wake is not None or waiting_left:
            return LoopStatus.SCHEDULED, wake
        return LoopStatus.IDLE, None


@dataclass(frozen=True)
class Renewal:
    """What a step's first statement reads as it renews the lease: the runtime
    ``MAX_CONCURRENCY``, whether cancel requests wait, and the earliest start of a
    SCHEDULED or RETRYING job (None: there is none)."""

    max_concurrency: int | None
    cancels_waiting: bool
    next_deferred: datetime | None


def renew_lease(generation: int, now: datetime, arrivals_until: datetime) -> Renewal | None:
    """Renew the lease of ``generation`` in this step's transaction, and record that the
    step counts the arrivals until ``arrivals_until``; None if another process took it.
    The same statement reads the :class:`Renewal`, the step's inputs that no row it
    reads anyway tells (each through an index), and on PostgreSQL applies
    :data:`STEP_SETTINGS` to the step's transaction."""
    connection = queue_connection()
    table = connection.ops.quote_name(LoopState._meta.db_table)
    cancels = connection.ops.quote_name(CancelRequest._meta.db_table)
    returning = [
        "max_concurrency",
        f"EXISTS (SELECT 1 FROM {cancels})",
        *(f"({deferred})" for deferred in deferred_heads()),
    ]
    if connection.vendor == "postgresql":
        returning += [f"set_config('{name}', '{value}', true)" for name, value in STEP_SETTINGS]
    sql = (
        f"UPDATE {table} SET lease_expires_at = %s, updated_at = %s, arrivals_until = %s"
        f" WHERE id = %s AND generation = %s RETURNING {', '.join(returning)}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    params = [adapt(lease_end(now)), adapt(now), adapt(arrivals_until)]
    statement = server_statement("ratequeue_renew_lease", sql)
    rows = execute(connection, statement, [*params, LoopState.SINGLETON, generation])
    if not rows:
        return None
    max_concurrency, cancels_waiting, *starts = rows[0][: 2 + len(DEFERRED_STATUSES)]
    deferred = min((aware(start) for start in starts if start is not None), default=None)
    return Renewal(max_concurrency, bool(cancels_waiting), deferred)


def deferred_heads() -> list[str]:
    """Per deferred status, the SQL that reads its earliest start (through its index)."""
    table = queue_connection().ops.quote_name(Job._meta.db_table)
    return [
        f"SELECT start_at FROM {table} WHERE status = '{status.value}' ORDER BY start_at LIMIT 1"
        for status in DEFERRED_STATUSES
    ]


def next_deferred_start() -> datetime | None:
    """The earliest start of a SCHEDULED or RETRYING job, if any, in one statement."""
    connection = queue_connection()
    sql = " UNION ALL ".join(
        f"SELECT * FROM ({head}) AS h{n}" for n, head in enumerate(deferred_heads())
    )
    statement = server_statement(
        "ratequeue_next_deferred", f"SELECT MIN(start_at) FROM ({sql}) AS d"
    )
    ((start,),) = execute(connection, statement, [])
    return None if start is None else aware(start)


def first_arrival_since(moment: datetime) -> datetime | None:
    """The creation time of the first job created at ``moment`` or later (through the
    jobs' creation index), if any."""
    return (
        Job.objects.filter(created_at__gte=moment)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def aware(value: datetime | str) -> datetime:
    """A datetime column read with raw SQL, as an aware datetime (SQLite gives naive UTC,
    or text where a UNION hides the column's type)."""
    moment = parse_datetime(value) if isinstance(value, str) else value
    assert moment is not None
    return moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment

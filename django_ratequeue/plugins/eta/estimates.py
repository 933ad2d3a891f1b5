"""The promised start: where a job waits, and when it will start (:class:`Eta`).

:func:`job_etas` estimates a page of jobs at once. Per job it reads the jobs ahead of it
in its queue and key (:func:`jobs_ahead`: four bounded ranges of the dispatch index);
per page, the active attempts, the limits in force (:mod:`.capacity`, as the dispatch
reads them), each queue's mean run time (as the rollups tell it: :func:`.hooks.run_time`)
and each rate-gated queue's rate limit; whether a job starts at the next step, it asks
the dispatch's own rounds (:class:`.rounds.NextStep`). docs/eta.md tells how each basis
estimates and how accurate it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import hooks
from django_ratequeue.engine.capacity import Capacity
from django_ratequeue.engine.estimate import Eta
from django_ratequeue.engine.heartbeat import queue_served
from django_ratequeue.engine.knowing import Knowing
from django_ratequeue.engine.models import (
    DEFERRED_STATUSES,
    FINAL_STATUSES,
    Attempt,
    Job,
    Status,
    queue_connection,
)
from django_ratequeue.engine.rounds import NextStep
from django_ratequeue.engine.tokens import Tokens

# The jobs ahead counted at most (per range of the dispatch index: see jobs_ahead).
POSITION_LIMIT = 10_000
# What a job's estimate reads of the job.
ETA_FIELDS = (
    "status",
    "func",
    "queue",
    "concurrency_key",
    "priority",
    "tokens_reserved",
    "start_at",
    "created_at",
    "max_concurrency",
    "cost",
)


@dataclass(frozen=True)
class Ahead:
    """What waits ahead of a job in its copy of the queue: how many, and the tokens they
    have yet to reserve."""

    jobs: int
    unreserved_cost: int

    @property
    def capped(self) -> bool:
        return self.jobs >= POSITION_LIMIT


def owner_view(eta: Eta, job: Job) -> Eta:
    """Return ``eta`` as the HTTP API shows it to ``job``'s owner: the estimate alone.

    The position counts the jobs ahead in the job's copy of its queue, other owners'
    too: it is shown only where those can only be the owner's (the job's concurrency key
    is its owner) or where the project shows it (the queue's ``public_position``)."""
    config = ratequeue_settings().QUEUES.get(job.queue)
    if (config is not None and config.public_position is True) or (
        job.owner and job.concurrency_key == job.owner
    ):
        return eta
    return replace(eta, position=None, position_capped=None)


def job_eta(job: Job, now: datetime | None = None) -> Eta:
    """Return the estimate of one job (read with at least :data:`ETA_FIELDS`)."""
    return job_etas([job], now)[job.pk]


def job_etas(jobs: list[Job], now: datetime | None = None) -> dict[str, Eta]:
    """Return the estimate of each job, by id: a bounded number of index reads per job."""
    estimator = Estimator(clock.now() if now is None else now)
    return {job.pk: estimator.eta(job) for job in jobs}


class Estimator:
    """Estimate jobs' starts at ``now``, reading what jobs of a page share once."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        # The limits in force, asked as the dispatch asks them; its places held once read.
        self.capacity = Capacity()
        self._running: list[Attempt] | None = None
        self._next_step: NextStep | None = None
        self._run_times: dict[str, float | None] = {}
        self._handoffs: dict[str, timedelta] = {}
        self.tokens = Tokens(now)
        self.knowing = Knowing(now)
        self._served: dict[str, bool] = {}

    def eta(self, job: Job) -> Eta:
        """Return ``job``'s estimate."""
        if job.status in FINAL_STATUSES:
            return Eta(0, None, None, "finished")
        if job.status == Status.RUNNING:
            return self.dispatched_eta(job)
        ahead = jobs_ahead(job)
        position = min(ahead.jobs, POSITION_LIMIT)
        if self.capacity.paused(job.queue, job.concurrency_key, job.max_concurrency):
            return Eta(position, None, None, "paused", ahead.capped)
        if not self.served(job.queue):
            note = f"no running worker serves queue `{job.queue}`"
            return Eta(position, None, None, "no_worker", ahead.capped, note=note)
        if job.tokens_reserved and job.start_at > self.now:
            return Eta(position, job.start_at, job.start_at, "reservation", ahead.capped)
        # Reserved and due, it starts when the dispatch gives it a place.
        earliest, basis = self.now, "reservation" if job.tokens_reserved else "throughput"
        if job.status in DEFERRED_STATUSES and job.start_at > self.now:
            earliest = job.start_at
            basis = "schedule" if job.status == Status.SCHEDULED else "retry"
        rate_limit = self.capacity.limits(job.queue).rate_limit
        if rate_limit and job.cost and not job.tokens_reserved:
            needed = ahead.unreserved_cost + job.cost
            tokens_at = self.tokens.at(rate_limit, job.concurrency_key, needed)
            if tokens_at is not None and tokens_at > earliest:
                earliest, basis = tokens_at, "rate_limit"
        by_slots = self.slot_free_at(job, position)
        if by_slots is None:
            return Eta(position, earliest, None, "unknown", ahead.capped)
        if by_slots > earliest:
            return Eta(position, earliest, by_slots, "throughput", ahead.capped)
        return Eta(position, earliest, earliest, basis, ahead.capped)  # type: ignore[arg-type]

    def dispatched_eta(self, job: Job) -> Eta:
        """Return the estimate of a RUNNING job: ``no_worker`` while its attempt waits for
        a worker that knows its function (:mod:`.knowing`), else ``running``."""
        unclaimed = any(
            a.job_id == job.pk and not a.worker and not a.remote for a in self.running()
        )
        note = self.knowing.note(job.func, unclaimed)
        return (
            Eta(0, None, None, "no_worker", note=note) if note else Eta(0, None, None, "running")
        )

    def served(self, queue: str) -> bool:
        """Say whether a worker that runs ``queue``'s jobs is alive (asked once a page)."""
        if queue not in self._served:
            self._served[queue] = queue_served(queue)
        return self._served[queue]

    def running(self) -> list[Attempt]:
        """Return the active attempts (read once: as many as hold slots), whose places the
        capacity counts from then on."""
        if self._running is None:
            fields = ("queue", "concurrency_key", "dispatched_at", "started_at", "job", "worker")
            active = Attempt.objects.filter(active=True)
            attempts = active.only(*fields, "remote", "wait", "wait_queue")
            self._running = list(attempts)
            self.capacity.hold(self._running)
        return self._running

    def slot_free_at(self, job: Job, position: int) -> datetime | None:
        """Return when a slot of the job's copy of the queue comes to it.

        A slot frees a mean run time after its attempt started, and each job it takes
        next starts a hand-off later (a runner's claim) and holds it a run more; the job
        takes the slot that frees ``position``-th. None: a slot is not free now and no
        run time is known."""
        running = self.running()  # the capacity counts their places from then on
        in_copy = [
            a
            for a in running
            if a.holds_queue_slot
            and a.queue == job.queue
            and a.concurrency_key == job.concurrency_key
        ]
        free = self.capacity.free(job.queue, job.concurrency_key, job.max_concurrency)
        if position < free and job.status == Status.WAITING:
            # The limits leave it a place: the dispatch's next step says whether it is its.
            next_step = self.next_step()
            if job.pk in next_step.placed:
                return next_step.starts[job.pk]
            free = next_step.per_copy[(job.queue, job.concurrency_key)]
        elif position < free:
            return self.now
        run_time = self.run_time(job.queue)
        if run_time is None:
            return None
        mean, handoff = timedelta(seconds=run_time), self.handoff(job.queue)
        slots = sorted(
            [max(self.now, (a.started_at or a.dispatched_at + handoff) + mean) for a in in_copy]
            + [self.now] * free
        )
        if not slots:  # every slot held elsewhere: one frees after a run, say
            slots = [self.now + mean]
        turn, slot = divmod(position, len(slots))
        return slots[slot] + turn * (handoff + mean) + handoff

    def next_step(self) -> NextStep:
        """Return what the dispatch's next step starts (simulated once a page)."""
        if self._next_step is None:
            self._next_step = NextStep(self.capacity, self.tokens, self.running())
        return self._next_step

    def handoff(self, queue: str) -> timedelta:
        """Return how long ``queue``'s attempts now running waited for a runner to start them.

        That is their mean from dispatch to start (none started: no wait)."""
        if queue not in self._handoffs:
            waits = [
                a.started_at - a.dispatched_at
                for a in self.running()
                if a.queue == queue and a.started_at is not None
            ]
            mean = sum(waits, timedelta()) / len(waits) if waits else timedelta()
            self._handoffs[queue] = max(mean, timedelta())
        return self._handoffs[queue]

    def run_time(self, queue: str) -> float | None:
        """Return the mean run time of ``queue``'s attempts, in seconds (None: none ran).

        As the plug-in that knows run times tells it (the rollups); none: unknown."""
        if queue not in self._run_times:
            self._run_times[queue] = hooks.run_time(queue, self.now)
        return self._run_times[queue]


def jobs_ahead(job: Job) -> Ahead:
    """Count the WAITING jobs that start before ``job`` in its queue and key.

    The order is READY_ORDER's (priority, reserved first, start_at, created_at), split
    into four ranges of the dispatch index, each read to at most POSITION_LIMIT entries:
    a higher priority; the same one, reserved when the job is not; the same, ready
    earlier; ready at the same time, created earlier."""
    connection = queue_connection()
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    start_at, created_at = adapt(job.start_at), adapt(job.created_at)
    copy = f"status = '{Status.WAITING.value}' AND queue = %s AND concurrency_key = %s"
    same = "priority = %s AND tokens_reserved = %s"
    ranges: list[tuple[str, list[Any]]] = [
        ("priority > %s", [job.priority]),
        (f"{same} AND start_at < %s", [job.priority, job.tokens_reserved, start_at]),
        (
            f"{same} AND start_at = %s AND created_at < %s",
            [job.priority, job.tokens_reserved, start_at, created_at],
        ),
    ]
    if not job.tokens_reserved:
        ranges.append(("priority = %s AND tokens_reserved = %s", [job.priority, True]))
    parts, params = [], []
    for number, (where, values) in enumerate(ranges):
        parts.append(
            f"SELECT * FROM (SELECT cost, tokens_reserved FROM {table}"
            f" WHERE {copy} AND {where} LIMIT %s) AS r{number}"
        )
        params += [job.queue, job.concurrency_key, *values, POSITION_LIMIT]
    sql = (
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN tokens_reserved THEN 0 ELSE cost END), 0)"
        f" FROM ({' UNION ALL '.join(parts)}) AS ahead"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        jobs, cost = cursor.fetchone()
    return Ahead(int(jobs), int(cost))


# An estimate moved materially when it moved by more than this share of the wait left...
MATERIAL_SHARE = 0.1
# ...and by more than this.
MATERIAL_SECONDS = 1.0


def moved_materially(before: Eta | None, after: Eta, now: datetime) -> bool:
    """Return whether ``after`` tells a watcher who was told ``before`` something new.

    That is another position or basis, an estimate that appeared or went, or one that
    moved by more than MATERIAL_SECONDS and MATERIAL_SHARE of the wait it had left (a
    start already due counts as due now)."""
    if before is None:
        return True
    if (before.position, before.basis, before.position_capped) != (
        after.position,
        after.basis,
        after.position_capped,
    ):
        return True
    if before.estimated_start is None or after.estimated_start is None:
        return (before.estimated_start is None) != (after.estimated_start is None)
    # Times past count as now: a start due "now" a second ago is still due now.
    shift = abs(
        (max(after.estimated_start, now) - max(before.estimated_start, now)).total_seconds()
    )
    wait = max((before.estimated_start - now).total_seconds(), 0.0)
    return shift > max(MATERIAL_SECONDS, MATERIAL_SHARE * wait)

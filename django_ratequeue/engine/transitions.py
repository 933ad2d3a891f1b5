"""Job state transitions the loop applies: finish, cancel, retry, recover, callbacks.

Each takes rows the loop read in its step and moves them on, in the step's transaction:
the outcome of an ended attempt to its job (:meth:`.models.Job.settle` decides it), cancel
requests, due jobs back to WAITING, attempts of dead workers and overruns ended, and the
``on_complete`` job of every job that reaches a final status. docs/concepts.md tells why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from django.db import DatabaseError
from django.db.models import Q

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import later
from django_ratequeue.engine.bulk import update_rows
from django_ratequeue.engine.creation import create_callback
from django_ratequeue.engine.knowing import Knowing
from django_ratequeue.engine.models import (
    FINAL_STATUSES,
    REPORT_FIELDS,
    Attempt,
    CancelRequest,
    Job,
    Outcome,
    Status,
    WorkerHeartbeat,
    WorkerKey,
)
from django_ratequeue.engine.moves import Moves
from django_ratequeue.engine.registry import unknown_job_error
from django_ratequeue.engine.workerkeys import lease_lapsed
from django_ratequeue.exceptions import (
    AttemptTimedOut,
    UnknownJob,
    WorkerLost,
    class_path,
    describe,
)

logger = logging.getLogger("django_ratequeue.queue")

# Rows one step handles at most of each kind, to keep its transaction short.
STEP_LIMIT = 1000
CANCELS_PER_STEP = 100
# What finishing an attempt writes to its job, and what it reads to decide.
JOB_OUTCOME_FIELDS = [
    "status",
    "attempts",
    "result",
    "error",
    "traceback",
    "exception_class_path",
    "start_at",
    "finished_at",
]
FINISH_FIELDS = [
    *JOB_OUTCOME_FIELDS,
    "retry",
    "cancel_requested",
    "on_complete",
    "context",
    "owner",
    "queue",
    "func",
    "batch_id",
    "traceparent",
]
# What canceling a job not started reads of it.
CANCEL_FIELDS = (
    "on_complete",
    "context",
    "result",
    "owner",
    "queue",
    "func",
    "attempts",
    "batch_id",
    "traceparent",
)
T = TypeVar("T")


def finish(ended_ids: list[int], now: datetime, moves: Moves) -> datetime | None:
    """Apply the outcome of ended attempts to their jobs; return the earliest retry.

    Records in ``moves`` the attempts that ran, the retries and the jobs that finished.
    """
    ended = ended_with_jobs(ended_ids)
    changed: list[Job] = []
    retries: list[Job] = []
    released: list[int] = []
    for attempt in ended:
        job = attempt.job
        if job.status != Status.RUNNING:
            continue
        if not isolated(job, now, partial(_settle, job, attempt, now), False, moves):
            continue
        changed.append(job)
        if attempt.started_at is None:
            # Canceled before it started, it stays in the job's timeline as it ended; if its
            # worker died before starting it, it was no try: it goes, the job waits again.
            if job.status == Status.WAITING:
                released.append(attempt.pk)
            continue
        moves.ran.append((job, attempt))
        if job.status == Status.RETRYING:
            retries.append(job)
    finals = [job for job in changed if job.status in FINAL_STATUSES]
    moves.retried.extend(retries)
    moves.finished.extend(finals)
    Attempt.objects.filter(pk__in=[a.pk for a in ended]).finalize()
    if released:
        Attempt.objects.filter(pk__in=released).delete()
    update_rows(Job, changed, JOB_OUTCOME_FIELDS)
    create_callbacks(finals, now)
    return min((job.start_at for job in retries), default=None)


def ended_with_jobs(ended_ids: list[int]) -> list[Attempt]:
    """Read the ended attempts with their jobs, one object per job.

    Should two attempts of a job end together, both hold the same job object."""
    ended = list(
        Attempt.objects.filter(pk__in=ended_ids)
        .select_related("job")
        .only("job", *REPORT_FIELDS, *(f"job__{name}" for name in FINISH_FIELDS))
    )
    jobs: dict[str, Job] = {}
    for attempt in ended:
        attempt.job = jobs.setdefault(attempt.job_id, attempt.job)
    return ended


def _settle(job: Job, attempt: Attempt, now: datetime) -> bool:
    job.settle(attempt, now)
    return True


def recover(now: datetime, dead_after: timedelta) -> bool:
    """End the attempts that were lost or overran; return whether any was ended.

    Lost: their worker died, their remote lease lapsed for good, or no worker claimed them
    within ``WORKER_DEAD_AFTER`` of their dispatch although a live worker that knows their
    function runs none of our jobs (the pass holding their batch died, or the broker lost
    its task; while every worker is busy, a task simply waits in the broker). An attempt
    that never started is not a try: :func:`finish` puts its job back to WAITING. One
    that no live worker knows waits for one that does (:func:`unclaimed`)."""
    candidates = list(
        Attempt.objects.filter(active=True, ended_at=None).only(
            "job",
            "worker",
            "worker_key",
            "started_at",
            "timeout",
            "dispatched_at",
            "remote",
            "lease_expires_at",
        )
    )
    if not candidates:
        return False
    alive = set(
        WorkerHeartbeat.objects.filter(seen_at__gte=now - dead_after).values_list("id", flat=True)
    )
    idle = alive - {a.worker for a in candidates if not a.remote and a.started_at is not None}
    late = {
        a.pk: a
        for a in candidates
        if not a.worker and not a.remote and a.dispatched_at + dead_after < now
    }
    jobs = Job.objects.filter(pk__in={a.job_id for a in late.values()})
    funcs = dict(jobs.values_list("pk", "func")) if late else {}
    knowing = Knowing(now)
    heard = keys_heard({a.worker_key_id for a in candidates if a.worker_key_id is not None})
    recovered = False
    for attempt in candidates:
        if attempt.pk in late:
            verdict = unclaimed(attempt, funcs.get(attempt.job_id, ""), knowing, idle, now)
        else:
            lost = is_lost(attempt, alive, heard, now)
            verdict = lost_or_overrun(attempt, lost, now, dead_after)
        if verdict is not None and end_unchanged(attempt, verdict, now):
            recovered = True
    return recovered


def keys_heard(keys: set[int]) -> dict[int, tuple[datetime | None, bool]]:
    """Return when each worker key of ``keys`` was last seen, and whether it is revoked."""
    return {
        pk: (seen, revoked is not None)
        for pk, seen, revoked in WorkerKey.objects.filter(pk__in=keys).values_list(
            "pk", "last_seen", "revoked_at"
        )
    }


def is_lost(
    attempt: Attempt,
    alive: set[str],
    heard: dict[int, tuple[datetime | None, bool]],
    now: datetime,
) -> bool:
    """Say whether ``attempt``'s worker lost it.

    A local one's worker is not ``alive`` (its heartbeat stopped); a remote one's lease
    lapsed for good (:func:`.workerkeys.lease_lapsed`; ``heard``: when each key was last
    seen, and whether it is revoked)."""
    if not attempt.remote:
        return attempt.worker not in alive
    seen, revoked = heard.get(attempt.worker_key_id or 0, (None, True))
    return lease_lapsed(attempt.lease_expires_at, seen, revoked, now)


@dataclass(frozen=True)
class Verdict:
    """Say how recovery ends an attempt: its outcome ("" for no try), error and class."""

    outcome: str
    error: str
    error_class: type[BaseException] | None = None


def unclaimed(
    attempt: Attempt, func: str, knowing: Knowing, idle: set[str], now: datetime
) -> Verdict | None:
    """Return how to end a local attempt no runner claimed within ``WORKER_DEAD_AFTER``.

    While no live worker knows its function it waits, no try, and its job fails with
    :class:`UnknownJob` once ``UNKNOWN_JOB_PATIENCE`` has passed since its dispatch. While
    a live worker that knows it is idle, a signal was lost: its job waits again. None:
    it waits on."""
    if not knowing.known(func):
        patience = ratequeue_settings().UNKNOWN_JOB_PATIENCE
        if later(attempt.dispatched_at, patience) < now:
            return Verdict(Outcome.NON_RETRYABLE, unknown_job_error(func, patience), UnknownJob)
        return None
    if knowing.known(func, among=idle):
        return Verdict("", "No worker claimed this attempt; its job waits again.")
    return None


def lost_or_overrun(
    attempt: Attempt, lost: bool, now: datetime, dead_after: timedelta
) -> Verdict | None:
    """Return how to end ``attempt`` if it is ``lost`` or overran its timeout, else None.

    ``lost``: as :func:`is_lost` says. One no worker claimed is :func:`unclaimed`'s (a
    remote one waits for a remote worker)."""
    if not attempt.worker:
        return None
    if attempt.started_at is None and lost:
        return Verdict("", "Its worker died before it started; its job waits again.")
    if lost and attempt.remote:
        return Verdict(Outcome.WORKER_LOST, "The remote worker's lease on it lapsed.", WorkerLost)
    if lost:
        return Verdict(Outcome.WORKER_LOST, "The worker running this attempt died.", WorkerLost)
    if (
        attempt.started_at is not None
        and attempt.timeout is not None
        and later(attempt.started_at, attempt.timeout + dead_after.total_seconds()) < now
    ):
        error = f"The attempt overran its timeout of {attempt.timeout:g} seconds."
        return Verdict(Outcome.TIMED_OUT, error, AttemptTimedOut)
    return None


def end_unchanged(attempt: Attempt, verdict: Verdict, now: datetime) -> bool:
    """End ``attempt`` as ``verdict`` says, only if nothing moved since it was read.

    The runner's claim and report use the same conditions, so exactly one side wins (a
    heartbeat that extended a lease meanwhile wins too)."""
    ended = Attempt.objects.filter(
        pk=attempt.pk,
        ended_at=None,
        started_at=attempt.started_at,
        worker=attempt.worker,
        lease_expires_at=attempt.lease_expires_at,
    ).update(
        ended_at=now,
        outcome=verdict.outcome,
        error=verdict.error,
        exception_class_path=class_path(verdict.error_class) if verdict.error_class else "",
    )
    if ended:
        logger.warning(
            "Recovered attempt %s of job %r: %s: %s",
            attempt.pk,
            attempt.job_id,
            verdict.outcome or "never started",
            verdict.error,
        )
    return bool(ended)


def apply_cancels(now: datetime, moves: Moves) -> tuple[bool, bool]:
    """Apply the oldest cancel requests; return (did work, more requests are left).

    The jobs canceled at once are recorded in ``moves``; running ones finish when their
    attempt ends."""
    requests = list(CancelRequest.objects.order_by("pk")[:CANCELS_PER_STEP])
    if not requests:
        return False, False
    done: list[int] = []
    budget = STEP_LIMIT
    for request in requests:
        scope = Q(created_at__lte=request.created_at)
        if request.job_id:
            scope = Q(pk=request.job_id)
        elif request.batch_id:
            scope = Q(batch_id=request.batch_id) & ~Q(batch_id="")
        elif request.queue:
            scope &= Q(queue=request.queue)
        pending = list(Job.objects.filter(scope).not_started().only(*CANCEL_FIELDS)[:budget])
        for job in pending:
            job.status, job.finished_at = Status.CANCELED, now
            moves.finished.append(job)
        Job.objects.filter(pk__in=[j.pk for j in pending]).cancel(now)
        create_callbacks(pending, now)
        running = Job.objects.filter(scope, status=Status.RUNNING, cancel_requested=False)
        # An attempt not started yet never will be: end it now (a runner's claim needs
        # started_at still empty, so exactly one side wins).
        Attempt.objects.filter(job__in=running).end_unstarted(now, "Canceled before it started.")
        running.request_cancel()
        budget -= len(pending)
        if budget <= 0:
            break
        done.append(request.pk)
    CancelRequest.objects.filter(pk__in=done).delete()
    return True, len(done) < len(requests) or len(requests) == CANCELS_PER_STEP


def promote_due(now: datetime) -> int:
    """Turn due SCHEDULED and RETRYING jobs WAITING, at most STEP_LIMIT; return how many."""
    due = list(Job.objects.due(now).values_list("pk", flat=True)[:STEP_LIMIT])
    if not due:
        return 0
    # start_at re-checked: a debounce may have pushed it back since the read (uniqueclaims.py).
    return Job.objects.filter(pk__in=due, start_at__lte=now).promote()


def isolated(job: Job, now: datetime, work: Callable[[], T], fallback: T, moves: Moves) -> T:
    """Do the loop's ``work`` on one job, failing only that job should it raise.

    Should ``work`` raise (a row changed behind the app's back, a setting removed while
    the job waited...), fail that job with the error, log it, and return ``fallback``:
    the step goes on for every other job.

    The one place where per-job work is guarded. Only Python errors are: a database error
    aborts the step's transaction, which the next step (or pass) does again."""
    try:
        return work()
    except DatabaseError:
        raise
    except Exception as error:
        logger.exception("Main loop: job %r could not be processed; failing it", job.pk)
        fail_job(job, f"The main loop could not process this job: {describe(error)}", now, moves)
        return fallback


def fail_job(job: Job, error: str, now: datetime, moves: Moves) -> None:
    """Fail a job the loop cannot go on with, and create its ``on_complete`` call.

    For a WAITING job that could never start, or a row the loop cannot process. The job
    raised nothing itself: no traceback, no exception class."""
    job.status, job.error, job.finished_at = Status.FAILED, error, now
    moves.finished.append(job)
    job.traceback = job.exception_class_path = ""
    Job.objects.filter(pk=job.pk).fail(error, now)
    create_callbacks([job], now)


def create_callbacks(finished: list[Job], now: datetime) -> None:
    """Create the on_complete job of each finished job that asked for one.

    Each is created as an enqueue creates a job (:func:`.creation.create_callback`),
    owned by its job's owner and continuing its job's trace."""
    for job in finished:
        if not job.on_complete:
            continue
        outcome = {
            "job_id": job.pk,
            "status": str(job.status),
            "result": job.result if job.status == Status.COMPLETE else None,
            "error": job.error if job.status == Status.FAILED else None,
            "context": job.context,
        }
        create_callback(
            job.on_complete,
            outcome,
            now,
            owner=job.owner,
            traceparent=job.traceparent,
            of=f"job {job.pk!r}",
        )

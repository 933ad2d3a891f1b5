"""Job state transitions the loop applies: finish, cancel, retry, callbacks.

Each takes rows the loop read in its step and moves them on, in the step's transaction:
the outcome of an ended attempt to its job (:meth:`.models.Job.settle` decides it), cancel
requests, due jobs back to WAITING, and the ``on_complete`` job of every job that reaches
a final status. Attempts of dead workers and overruns are ended by ``recovery``.
docs/concepts.md tells why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial
from typing import TypeVar

from django.db import DatabaseError
from django.db.models import Q

from django_ratequeue.engine.bulk import update_rows
from django_ratequeue.engine.creation import create_callback
from django_ratequeue.engine.models import (
    FINAL_STATUSES,
    REPORT_FIELDS,
    Attempt,
    CancelRequest,
    Job,
    Status,
)
from django_ratequeue.engine.moves import Moves
from django_ratequeue.exceptions import StepConflict, describe

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
    written = update_rows(
        Job,
        changed,
        JOB_OUTCOME_FIELDS,
        condition="t.status = %s",
        condition_params=[Status.RUNNING.value],
        prepared_as="ratequeue_job_outcomes",
    )
    expect_moved(written, changed, "wrote the outcome of")
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
        canceled = Job.objects.filter(pk__in=[j.pk for j in pending]).cancel(now)
        expect_moved(canceled, pending, "canceled")
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


def expect_moved(moved: int, read: Iterable[Job], what: str) -> None:
    """Raise :class:`StepConflict` unless the write ``what`` moved every job of ``read``.

    Each job write of a step says in its ``WHERE`` which status it expects: the status
    it read."""
    expected = len({job.pk for job in read})
    if moved != expected:
        raise StepConflict(
            f"The main loop {what} {moved} of the {expected} jobs it read: another writer "
            "moved the others meanwhile; the step is rolled back."
        )


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

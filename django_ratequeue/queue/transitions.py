"""Job state transitions the loop applies: finish, cancel, retry, recover, callbacks.

Each takes rows the loop read in its step and moves them on, in the step's transaction:
the outcome of an ended attempt to its job (:meth:`.models.Job.settle` decides it), cancel
requests, due jobs back to WAITING, attempts of dead workers and overruns ended, and the
``on_complete`` job of every job that reaches a final status. docs/concepts.md tells why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from django.db import DatabaseError
from django.db.models import Q

from ..conf import ratequeue_settings
from ..exceptions import AttemptTimedOut, WorkerLost, class_path, describe
from .bounds import later
from .bulk import update_rows
from .models import (
    FINAL_STATUSES,
    REPORT_FIELDS,
    Attempt,
    CancelRequest,
    Job,
    Outcome,
    Status,
    WorkerHeartbeat,
    new_job_id,
)
from .rollups import Tally

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
]
T = TypeVar("T")


def finish(ended_ids: list[int], now: datetime, tally: Tally) -> datetime | None:
    """Apply the outcome of attempts that ended to their jobs (and count them in
    ``tally``: their run time, the retries and the final statuses). Returns the earliest
    start of the retries it scheduled, if any."""
    ended = list(
        Attempt.objects.filter(pk__in=ended_ids)
        .select_related("job")
        .only("job", *REPORT_FIELDS, *(f"job__{name}" for name in FINISH_FIELDS))
    )
    jobs: dict[str, Job] = {}
    for attempt in ended:  # one object per job, should two of its attempts end together
        jobs.setdefault(attempt.job_id, attempt.job)
    retry_at: datetime | None = None
    changed: list[Job] = []
    finals: list[Job] = []
    released: list[int] = []
    for attempt in ended:
        job = jobs.get(attempt.job_id)
        if job is None or job.status != Status.RUNNING:
            continue
        if not isolated(job, now, partial(_settle, job, attempt, now), False, tally):
            continue
        if attempt.started_at is None:
            # Canceled before it started, it stays in the job's timeline as it ended; if its
            # worker died before starting it, it was no try: it goes, the job waits again.
            if job.status == Status.WAITING:
                released.append(attempt.pk)
        else:
            assert attempt.ended_at is not None
            tally.run(job.queue, attempt.started_at, attempt.ended_at)
            if job.status == Status.RETRYING:
                tally.count(job.queue, "retried")
                retry_at = min(filter(None, [retry_at, job.start_at]))
        if job.status in FINAL_STATUSES:
            finals.append(job)
            tally.final(job.queue, job.status)
        changed.append(job)
    Attempt.objects.filter(pk__in=[a.pk for a in ended]).finalize()
    if released:
        Attempt.objects.filter(pk__in=released).delete()
    update_rows(Job, changed, JOB_OUTCOME_FIELDS)
    create_callbacks(finals, now)
    return retry_at


def _settle(job: Job, attempt: Attempt, now: datetime) -> bool:
    job.settle(attempt, now)
    return True


def recover(now: datetime, dead_after: timedelta) -> bool:
    """End attempts whose worker died, that overran their timeout, or that no worker
    claimed within ``WORKER_DEAD_AFTER`` of their dispatch although a live worker runs
    none of our jobs (the pass holding their batch died, or the broker lost its task;
    while every worker is busy, a task simply waits in the broker). An attempt that
    never started is not a try: :func:`finish` puts its job back to WAITING."""
    candidates = list(
        Attempt.objects.filter(active=True, ended_at=None).only(
            "job", "worker", "started_at", "timeout", "dispatched_at", "remote", "lease_expires_at"
        )
    )
    if not candidates:
        return False
    alive = set(
        WorkerHeartbeat.objects.filter(seen_at__gte=now - dead_after).values_list("id", flat=True)
    )
    idle = alive - {a.worker for a in candidates if not a.remote and a.started_at is not None}
    recovered = False
    for attempt in candidates:
        outcome: str
        error_class: type[BaseException] | None = None
        # A remote attempt lives by its lease, which its worker's heartbeats extend; a
        # local one by its worker process's heartbeat.
        lease = attempt.lease_expires_at
        lost = (
            (lease is not None and lease < now) if attempt.remote else attempt.worker not in alive
        )
        if not attempt.worker:
            # Runners were asked for; remote workers claim when they come.
            if attempt.remote or not idle or attempt.dispatched_at + dead_after >= now:
                continue
            outcome, error = "", "No worker claimed this attempt; its job waits again."
        elif attempt.started_at is None and lost:
            outcome, error = "", "Its worker died before it started; its job waits again."
        elif lost and attempt.remote:
            outcome, error = Outcome.WORKER_LOST, "The remote worker's lease on it lapsed."
            error_class = WorkerLost
        elif lost:
            outcome, error = Outcome.WORKER_LOST, "The worker running this attempt died."
            error_class = WorkerLost
        elif (
            attempt.started_at is not None
            and attempt.timeout is not None
            and later(attempt.started_at, attempt.timeout + dead_after.total_seconds()) < now
        ):
            outcome, error_class = Outcome.TIMED_OUT, AttemptTimedOut
            error = f"The attempt overran its timeout of {attempt.timeout:g} seconds."
        else:
            continue
        # Only if nothing moved since we looked: the runner's claim and report use the
        # same conditions, so exactly one side wins.
        # (A heartbeat that extended a lease meanwhile wins too.)
        if Attempt.objects.filter(
            pk=attempt.pk,
            ended_at=None,
            started_at=attempt.started_at,
            worker=attempt.worker,
            lease_expires_at=lease,
        ).update(
            ended_at=now,
            outcome=outcome,
            error=error,
            exception_class_path=class_path(error_class) if error_class else "",
        ):
            recovered = True
            logger.warning(
                "Recovered attempt %s of job %r: %s",
                attempt.pk,
                attempt.job_id,
                outcome or "never started",
            )
    return recovered


def apply_cancels(now: datetime, tally: Tally) -> tuple[bool, bool]:
    """Apply the oldest cancel requests; (did work, more requests are left). The jobs
    canceled at once count in ``tally``; running ones when their attempt ends."""
    requests = list(CancelRequest.objects.order_by("pk")[:CANCELS_PER_STEP])
    if not requests:
        return False, False
    done: list[int] = []
    budget = STEP_LIMIT
    for request in requests:
        scope = Q(created_at__lte=request.created_at)
        if request.job_id:
            scope = Q(pk=request.job_id)
        elif request.queue:
            scope &= Q(queue=request.queue)
        pending = list(
            Job.objects.filter(scope)
            .not_started()
            .only("on_complete", "context", "result", "owner", "queue")[:budget]
        )
        for job in pending:
            job.status, job.finished_at = Status.CANCELED, now
            tally.final(job.queue, Status.CANCELED)
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
    """Turn due SCHEDULED and RETRYING jobs WAITING, at most STEP_LIMIT; how many."""
    due = list(Job.objects.due(now).values_list("pk", flat=True)[:STEP_LIMIT])
    if due:
        Job.objects.filter(pk__in=due).promote()
    return len(due)


def isolated(job: Job, now: datetime, work: Callable[[], T], fallback: T, tally: Tally) -> T:
    """Do the loop's ``work`` on one job; should it raise (a row changed behind the app's
    back, a setting removed while the job waited...), fail that job with the error, log
    it, and return ``fallback``: the step goes on for every other job.

    The one place where per-job work is guarded. Only Python errors are: a database error
    aborts the step's transaction, which the next step (or pass) does again."""
    try:
        return work()
    except DatabaseError:
        raise
    except Exception as error:
        logger.exception("Main loop: job %r could not be processed; failing it", job.pk)
        fail_job(job, f"The main loop could not process this job: {describe(error)}", now, tally)
        return fallback


def fail_job(job: Job, error: str, now: datetime, tally: Tally) -> None:
    """Fail a job the loop cannot go on with (a WAITING job that could never start, or a
    row it cannot process), with its ``on_complete`` call. The job raised nothing itself:
    no traceback, no exception class."""
    job.status, job.error, job.finished_at = Status.FAILED, error, now
    tally.final(job.queue, Status.FAILED)
    job.traceback = job.exception_class_path = ""
    Job.objects.filter(pk=job.pk).fail(error, now)
    create_callbacks([job], now)


def create_callbacks(finished: list[Job], now: datetime) -> None:
    """Create the on_complete job of each finished job that asked for one, owned by the
    same owner."""
    callbacks = []
    retry = ratequeue_settings().DEFAULT_RETRIES.to_json()
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
        callbacks.append(
            Job(
                id=new_job_id(),
                func=job.on_complete,
                args=[outcome],
                kwargs={},
                queue="default",
                status=Status.WAITING,
                start_at=now,
                created_at=now,
                retry=retry,
                owner=job.owner,  # what it reports is its owner's to read
            )
        )
    if callbacks:
        Job.objects.bulk_create(callbacks)

"""Recovery: the loop ends the attempts that were lost or overran.

Lost: a local worker's heartbeat stopped, a remote worker's lease lapsed for good, or no
runner claimed a dispatched attempt although a live worker that knows its function is
idle. Each is ended only if nothing moved since it was read; :func:`.transitions.finish`
then takes the end to its job. docs/concepts.md ("Recovery") tells why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import later
from django_ratequeue.engine.knowing import Knowing
from django_ratequeue.engine.models import Attempt, Job, Outcome, WorkerHeartbeat, WorkerKey
from django_ratequeue.engine.registry import unknown_job_error
from django_ratequeue.engine.workerkeys import lease_lapsed
from django_ratequeue.exceptions import AttemptTimedOut, UnknownJob, WorkerLost, class_path

logger = logging.getLogger("django_ratequeue.queue")

# What recovery reads of each active attempt to judge it.
CANDIDATE_FIELDS = (
    "job",
    "worker",
    "worker_key",
    "started_at",
    "timeout",
    "dispatched_at",
    "remote",
    "lease_expires_at",
)


def recover(now: datetime, dead_after: timedelta) -> bool:
    """End the attempts that were lost or overran; return whether any was ended.

    Lost: their worker died, their remote lease lapsed for good, or no worker claimed them
    within ``WORKER_DEAD_AFTER`` of their dispatch although a live worker that knows their
    function runs none of our jobs (the pass holding their batch died, or the broker lost
    its task; while every worker is busy, a task simply waits in the broker). An attempt
    that never started is not a try: :func:`.transitions.finish` puts its job back to
    WAITING. One that no live worker knows waits for one that does (:func:`unclaimed`)."""
    candidates = list(Attempt.objects.filter(active=True, ended_at=None).only(*CANDIDATE_FIELDS))
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

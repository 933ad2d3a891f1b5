"""Claims, leases and releases: how a worker takes, keeps and gives back attempts.

Who holds an attempt is a :class:`Claimant`."""

from __future__ import annotations

import re
from collections.abc import Collection
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.models import (
    Attempt,
    Job,
    OutputChunk,
    WorkerKey,
    queue_connection,
    queue_db,
)
from django_ratequeue.engine.protocol.sql import Scope, claimed, run_claim
from django_ratequeue.engine.reconnects import through_reconnects
from django_ratequeue.engine.wakeup import WORK, signal
from django_ratequeue.exceptions import LeaseLost
from django_ratequeue.signals import announce

# A worker program's name for itself (random per process), as it sends it with its claims.
INSTANCE = re.compile(r"\A[A-Za-z0-9_-]{1,32}\Z")
# A retry is left this long to the other workers before the one its previous attempt
# ran on (and failed or lost) may take it.
RETRY_ELSEWHERE = timedelta(seconds=1)
# What a local claim reads of its attempts where the database returns only their ids.
LOCAL_READ = (
    "timeout",
    "queue",
    "started_at",
    "job__func",
    "job__args",
    "job__kwargs",
    "job__start_at",
    "job__traceparent",
)


@dataclass(frozen=True)
class Claimant:
    """Identify who claims and reports attempts: a local runner or a remote worker.

    A local runner's ``worker`` is its process's heartbeat id; a remote worker of ``key``
    has for ``worker`` the name its program gave itself, and its attempts live by a lease.
    The attempts it claims hold both in their columns."""

    worker: str
    key: WorkerKey | None = None

    @classmethod
    def remote(cls, key: WorkerKey, instance: str) -> Claimant:
        """Return the remote worker ``instance`` of ``key``.

        ``""`` is any worker of the key, which may report on what another of them
        claimed."""
        return cls(instance, key)

    @property
    def key_id(self) -> int | None:
        return None if self.key is None else self.key.pk

    def holds(self) -> Q:
        """Return the attempts this claimant holds.

        For a remote one: those of any instance of its key, until recovery ends them. A
        lapsed lease is not lost yet (:func:`..workerkeys.lease_lapsed`): a late heartbeat
        renews it, a late report ends the attempt."""
        if self.key is None:
            return Q(worker=self.worker, ended_at=None)
        return Q(worker_key=self.key, ended_at=None)

    def holds_sql(self) -> tuple[str, list[Any]]:
        """Return :meth:`holds` as SQL on the row ``t``, with its parameters."""
        if self.key is None:
            return "t.worker = %s AND t.ended_at IS NULL", [self.worker]
        return "t.worker_key_id = %s AND t.ended_at IS NULL", [self.key.pk]

    def ended_by(self) -> Q:
        """Return the attempts a worker like this one ended (a report's own effect)."""
        if self.key is None:
            return Q(worker=self.worker, worker_key=None)
        return Q(worker_key=self.key)

    def mine(self) -> Q:
        """Return the attempts this very claimant claimed."""
        return Q(worker=self.worker, worker_key=self.key)


def lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=ratequeue_settings().REMOTE_LEASE)


def claim_local(claimant: Claimant, limit: int, functions: Collection[str] = ()) -> list[Attempt]:
    """Take up to ``limit`` local attempts nobody claimed yet, and start them now.

    Only attempts of ``functions`` are taken, if given: a runner claims only the jobs its
    process knows. The highest priority first, then in dispatch order: a free slot never
    starts a lower priority while a higher one waits. Through lost connections: claiming
    again also finds what a first try took before its connection broke (claimed by us,
    started at ``stamp``).

    The start is stamped once the claim may write: on SQLite, after its transaction got
    the database's write lock (``transaction_mode`` IMMEDIATE), so that no attempt starts
    before the step that dispatched it, however long the claim waited for the lock."""
    stamp: datetime | None = None
    tries = 0
    scope = Scope(functions=list(functions))

    def take() -> list[Attempt]:
        nonlocal tries, stamp
        tries += 1
        with write_lock():
            stamp = stamp or clock.now()
            rows = run_claim(scope, limit, claimant.worker, None, stamp, None)
        if tries == 1 and not rows:
            return []
        if tries == 1 and queue_connection().vendor == "postgresql":
            return sorted(map(claimed, rows), key=lambda a: (-a.job.priority, a.pk))
        # SQLite returns the attempts' ids only, and a try after a lost connection finds
        # what the first took too: read them.
        taken = Q(pk__in=[row[0] for row in rows]) | Q(started_at=stamp)
        return list(
            Attempt.objects.filter(taken, claimant.mine(), ended_at=None, active=True)
            .select_related("job")
            .only(*LOCAL_READ, "job__priority")
            .order_by("-job__priority", "pk")
        )

    attempts = through_reconnects(take)
    announce_started(attempts, claimant)
    return attempts


def write_lock() -> AbstractContextManager[Any]:
    """Return what holds the queue database's write lock around a claim, where it waits.

    SQLite's: a transaction, which takes the lock as it begins. PostgreSQL's claim
    waits for no lock (it skips the rows another claim holds): nothing."""
    if queue_connection().vendor == "sqlite":
        return transaction.atomic(using=queue_db())
    return nullcontext()


def announce_started(attempts: list[Attempt], claimant: Claimant) -> None:
    """Announce ``attempt_started`` for each attempt a claim took (their jobs read)."""
    records = [
        {
            "job_id": attempt.job_id,
            "func": attempt.job.func,
            "queue": attempt.queue,
            "attempt_id": attempt.pk,
            "worker": claimant.worker,
            "remote": claimant.key is not None,
        }
        for attempt in attempts
    ]
    announce("attempt_started", queue_db(), records)


@dataclass
class Claimed:
    """What a remote claim took, and when a retry it left to others becomes its to take.

    ``attempts`` includes what it had taken before, its answer lost; ``retry_at`` is None
    when it left no retry to other workers."""

    attempts: list[Attempt]
    retry_at: datetime | None = None


def claim_remote(
    claimant: Claimant,
    queues: Collection[str],
    functions: Collection[str],
    limit: int,
    running: Collection[int] = (),
) -> Claimed:
    """Take up to ``limit`` remote attempts of ``queues``, and start them under a fresh lease.

    Only attempts of ``functions`` are taken, if given. With them comes any attempt this
    instance holds that is not in ``running`` (what a first try took before its answer
    was lost comes back). A retry whose previous attempt ran on this instance is left to
    the other workers for ``RETRY_ELSEWHERE`` after it became claimable."""
    now = clock.now()
    retry_at = None
    taken: list[tuple[Any, ...]] = []
    if limit > 0:
        taken, retry_at = take_remote(claimant, queues, functions, limit, now)
    last_output = OutputChunk.objects.filter(job_id=OuterRef("job_id")).order_by("-index")
    attempts = (
        Attempt.objects.filter(
            claimant.mine(), claimant.holds(), active=True, lease_expires_at__gte=now
        )
        .exclude(pk__in=list(running))
        .select_related("job")
        .annotate(last_output=Subquery(last_output.values("index")[:1]))
        .order_by("-job__priority", "pk")
    )
    held: list[Attempt] = list(attempts)
    if limit > 0 and taken:
        new = {row[0] for row in taken}
        announce_started([a for a in held if a.pk in new], claimant)
    return Claimed(held, retry_at)


def take_remote(
    claimant: Claimant,
    queues: Collection[str],
    functions: Collection[str],
    limit: int,
    now: datetime,
) -> tuple[list[tuple[Any, ...]], datetime | None]:
    """Start up to ``limit`` new remote attempts for ``claimant``; return their rows, and
    when a retry it leaves to the others becomes its to take (None: none is left)."""
    candidates = Attempt.objects.filter(
        active=True, remote=True, worker="", ended_at=None, queue__in=list(queues)
    )
    if functions:
        candidates = candidates.filter(job__func__in=list(functions))
    avoided = avoided_retries(candidates, claimant.mine(), now)
    scope = Scope(True, list(queues), list(functions), list(avoided))
    taken = run_claim(scope, limit, claimant.worker, claimant.key_id, now, lease_end(now))
    if avoided and len(taken) < limit:
        return taken, min(avoided.values()) + RETRY_ELSEWHERE
    return taken, None


def avoided_retries(candidates: QuerySet[Attempt], mine: Q, now: datetime) -> dict[int, datetime]:
    """Return the candidates this instance leaves to others for now.

    They are given by id, with when they became claimable: retries, claimable for less
    than ``RETRY_ELSEWHERE``, of jobs an earlier attempt of which ran on this instance."""
    recent = list(
        candidates.filter(number__gt=1, dispatched_at__gt=now - RETRY_ELSEWHERE).values_list(
            "pk", "job_id", "number", "dispatched_at"
        )
    )
    if not recent:
        return {}
    ran_here = set(
        Attempt.objects.filter(mine, job_id__in={job for _pk, job, _n, _at in recent}).values_list(
            "job_id", "number"
        )
    )
    return {
        pk: at
        for pk, job, number, at in recent
        if any(earlier == job and n < number for earlier, n in ran_here)
    }


def heartbeat(claimant: Claimant, attempt_id: int) -> tuple[datetime, bool]:
    """Extend the lease; return its new end, and whether the job was canceled.

    A canceled job's worker may stop: whatever the attempt's outcome, the job ends
    CANCELED."""
    now = clock.now()
    until = lease_end(now)
    held = Attempt.objects.filter(claimant.holds(), pk=attempt_id)
    if not held.update(lease_expires_at=until):
        raise LeaseLost
    canceled = (
        Job.objects.filter(attempt_set__pk=attempt_id)
        .values_list("cancel_requested", flat=True)
        .first()
    )
    return until, bool(canceled)


def release(claimant: Claimant, attempt_ids: Collection[int]) -> int:
    """Hand back the attempts unfinished, as their worker stops; return how many.

    They are not tries, and another worker may claim them at once."""
    held = Attempt.objects.filter(claimant.holds(), pk__in=list(attempt_ids))
    released = held.update(worker="", worker_key=None, started_at=None, lease_expires_at=None)
    if released:
        signal(WORK)
    return released


def lock_held(claimant: Claimant, attempt_id: int) -> str:
    """Lock the attempt for the caller's transaction if ``claimant`` holds it.

    Recovery, which would end it, then waits. Return its job's id, or raise
    :class:`LeaseLost`."""
    held = Attempt.objects.filter(claimant.holds(), pk=attempt_id)
    job_id = held.select_for_update().values_list("job_id", flat=True).first()
    if job_id is None:
        raise LeaseLost
    return job_id

"""Remote workers: claims with a lease, and the reports of the attempts they hold.

A queue configured ``"remote": True`` is dispatched by the loop like any other, under the
same limits; its attempts are marked ``remote`` and only remote workers claim them, over
HTTP (django_ratequeue/api/workers.py). A claim takes attempts nobody's yet, the highest
priority first (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), starts them and gives each a
lease of ``REMOTE_LEASE`` seconds, which the worker's heartbeats extend. An attempt whose
lease lapsed is lost: every report on it is refused (:class:`LeaseLost`) and the loop's
recovery ends it as "worker lost", to be retried by its job's policy.

Each report is one conditional UPDATE of the attempt it is about (held by a worker of the
request's key, not ended, its lease not lapsed), and a report that ends the attempt
signals the loop in the same transaction. A report sent again after a lost response finds
its own effect and succeeds again without changing anything.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Max, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Length

from .. import clock
from ..conf import ratequeue_settings
from ..exceptions import LeaseLost, describe
from .bounds import clip
from .execution import REFUSED, check_result_size, refusal
from .models import Attempt, Job, Outcome, OutputChunk, WorkerKey, queue_db
from .progress import UNSET, checked_progress, checked_text, store
from .wakeup import LOOP, WORK, Waiter, signal
from .workerkeys import instance_attempts, key_tag, worker_name

# A worker program's name for itself (random per process), as it sends it with its claims.
INSTANCE = re.compile(r"\A[A-Za-z0-9_-]{1,32}\Z")
# A retry is left this long to the other workers before the one its previous attempt
# ran on (and failed or lost) may take it.
RETRY_ELSEWHERE = timedelta(seconds=1)


def held(key: WorkerKey, attempt_id: int, now: datetime) -> QuerySet[Attempt]:
    """The attempt, if a worker of ``key`` holds it still."""
    return Attempt.objects.filter(
        pk=attempt_id,
        worker__startswith=key_tag(key),
        ended_at=None,
        lease_expires_at__gte=now,
    )


def lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=ratequeue_settings().REMOTE_LEASE)


@dataclass
class Claimed:
    """What a claim took (with what it had taken before, its answer lost), and when a
    retry it left to other workers becomes its to take (None: it left none)."""

    attempts: list[Attempt]
    retry_at: datetime | None = None


def claim(
    key: WorkerKey,
    instance: str,
    queues: Collection[str],
    functions: Collection[str],
    limit: int,
    running: Collection[int] = (),
) -> Claimed:
    """Take up to ``limit`` remote attempts of ``queues`` (of ``functions`` if given),
    started now under a fresh lease; with them, any attempt this ``instance`` holds that
    is not in ``running`` (what a first try of the claim took before its response was
    lost comes back). A retry whose previous attempt ran on this instance is left to the
    other workers for ``RETRY_ELSEWHERE`` after it became claimable."""
    me = worker_name(key, instance)
    mine = instance_attempts(key, instance)
    now = clock.now()
    retry_at = None
    if limit > 0:
        with transaction.atomic(using=queue_db()):
            candidates = Attempt.objects.filter(
                active=True, remote=True, worker="", ended_at=None, queue__in=list(queues)
            )
            if functions:
                candidates = candidates.filter(job__func__in=list(functions))
            avoided = avoided_retries(candidates, mine, now)
            picked = list(
                candidates.exclude(pk__in=list(avoided))
                .order_by("-job__priority", "pk")
                .select_for_update(skip_locked=True, of=("self",))
                .values_list("pk", flat=True)[:limit]
            )
            if picked:
                Attempt.objects.filter(pk__in=picked, worker="", ended_at=None).update(
                    worker=me, started_at=now, lease_expires_at=lease_end(now)
                )
            if avoided and len(picked) < limit:
                retry_at = min(avoided.values()) + RETRY_ELSEWHERE
    last_output = OutputChunk.objects.filter(job_id=OuterRef("job_id")).order_by("-index")
    attempts = (
        Attempt.objects.filter(mine, active=True, ended_at=None, lease_expires_at__gte=now)
        .exclude(pk__in=list(running))
        .select_related("job")
        .annotate(last_output=Subquery(last_output.values("index")[:1]))
        .order_by("-job__priority", "pk")
    )
    return Claimed(list(attempts), retry_at)


def avoided_retries(candidates: QuerySet[Attempt], mine: Q, now: datetime) -> dict[int, datetime]:
    """The candidates this instance leaves to others for now (by id, with when they
    became claimable): retries, claimable for less than ``RETRY_ELSEWHERE``, of jobs an
    earlier attempt of which ran on it. Two small reads, the second only if there are
    such retries at all."""
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


def heartbeat(key: WorkerKey, attempt_id: int) -> tuple[datetime, bool]:
    """Extend the lease; returns its new end, and whether the job was canceled (its
    worker may stop: whatever the attempt's outcome, the job ends CANCELED)."""
    now = clock.now()
    until = lease_end(now)
    if not held(key, attempt_id, now).update(lease_expires_at=until):
        raise LeaseLost
    canceled = (
        Job.objects.filter(attempt_set__pk=attempt_id)
        .values_list("cancel_requested", flat=True)
        .first()
    )
    return until, bool(canceled)


def report_progress(key: WorkerKey, attempt_id: int, data: Any) -> None:
    """Store the job's progress (a JSON object); a ValueError or TypeError if it is not
    one the job could report itself."""
    value = checked_progress(data)
    with transaction.atomic(using=queue_db()):
        job_id = _lock_held(key, attempt_id)
        store(job_id, value, 0, [])


def append_output(key: WorkerKey, attempt_id: int, index: int, text: Any) -> None:
    """Store one piece of output, numbered ``index`` (the claim gives the first number;
    the worker counts on from it). Sent again, the same piece is a success that changes
    nothing; another piece with a number already used, or one that leaves a gap, is a
    ValueError: numbers stay below the count of pieces, which MAX_OUTPUT_LENGTH bounds."""
    settings = ratequeue_settings()
    text = checked_text(text)
    if not text or len(text) > settings.MAX_OUTPUT_CHUNK_LENGTH:
        raise ValueError(
            f"text must hold 1 to {settings.MAX_OUTPUT_CHUNK_LENGTH} characters "
            '(RATEQUEUE["MAX_OUTPUT_CHUNK_LENGTH"]).'
        )
    with transaction.atomic(using=queue_db()):
        job_id = _lock_held(key, attempt_id)
        chunks = OutputChunk.objects.filter(job_id=job_id)
        existing = chunks.filter(index=index).values_list("text", flat=True).first()
        if existing is not None:
            if existing != text:
                raise ValueError(f"Output {index} of this job is already another text.")
            return
        written = chunks.aggregate(length=Sum(Length("text")), last=Max("index"))
        following = (written["last"] or 0) + 1
        if index != following:
            raise ValueError(
                f"index must be {following}, the number after the job's last piece of output "
                "(or that of a piece sent already, sent again)."
            )
        length = written["length"] or 0
        if length + len(text) > settings.MAX_OUTPUT_LENGTH:
            raise ValueError(
                f"The job's output would exceed {settings.MAX_OUTPUT_LENGTH} characters "
                '(RATEQUEUE["MAX_OUTPUT_LENGTH"], all its attempts together).'
            )
        store(job_id, UNSET, index, [text])


def completion(result: Any) -> dict[str, Any]:
    """Return the outcome of a succeeded attempt with ``result``; if a local runner's job
    could not have returned it (a value a database cannot store, or one over
    MAX_RESULT_BYTES), the outcome of a failed attempt that says why, as a local runner
    records one (retried by the job's policy)."""
    try:
        check_result_size(result)
    except ValueError as error:
        return failure(describe(error), "", retryable=True)
    return {"outcome": Outcome.SUCCEEDED, "result": result}


def failure(
    error: str, traceback: str, retryable: bool, timed_out: bool = False
) -> dict[str, Any]:
    """Return the outcome of a failed attempt: retried by its job's policy unless not
    ``retryable``; ``timed_out``: it overran its timeout (the worker stopped waiting).
    Texts are stored whatever they hold (:func:`.bounds.clip`): the real error is kept."""
    limit = ratequeue_settings().MAX_ERROR_BYTES
    outcome = Outcome.FAILED if retryable else Outcome.NON_RETRYABLE
    return {
        "outcome": Outcome.TIMED_OUT if timed_out else outcome,
        "error": clip(error, limit),
        "traceback": clip(traceback, limit),
    }


def complete(key: WorkerKey, attempt_id: int, result: Any) -> str:
    """End the attempt as succeeded with ``result`` (see :func:`completion`); return the
    error it was failed with instead ("" if none)."""
    stored = end_many(key, {attempt_id: completion(result)})[attempt_id]
    if stored is None:
        raise LeaseLost
    return str(stored["error"])


def fail(
    key: WorkerKey,
    attempt_id: int,
    error: str,
    traceback: str,
    retryable: bool,
    timed_out: bool = False,
) -> None:
    """End the attempt as failed (see :func:`failure`)."""
    outcome = failure(error, traceback, retryable, timed_out)
    if end_many(key, {attempt_id: outcome})[attempt_id] is None:
        raise LeaseLost


def release(key: WorkerKey, attempt_id: int) -> None:
    """Hand the attempt back unfinished (its worker stops): it is not a try, and another
    worker may claim it at once."""
    with transaction.atomic(using=queue_db()):
        if not held(key, attempt_id, clock.now()).update(
            worker="", started_at=None, lease_expires_at=None
        ):
            raise LeaseLost
        signal(WORK)


def end_many(
    key: WorkerKey, outcomes: dict[int, dict[str, Any]]
) -> dict[int, dict[str, Any] | None]:
    """End each attempt with its outcome (:func:`completion`, :func:`failure`), in one
    transaction that signals the loop once; per attempt, the values stored, or None if a
    worker of ``key`` does not hold it (any more). The same report, sent again after its
    response was lost, finds its own effect and is answered the same, changing nothing.

    Should the database refuse a value (one that slipped past the checks of
    :mod:`.bounds`), the attempts are ended one by one, and one whose outcome it still
    refuses is ended as failed, with the database's reason: the others are not held up."""
    now = clock.now()
    stored = {
        attempt_id: {"result": None, "error": "", "traceback": "", **outcome}
        for attempt_id, outcome in outcomes.items()
    }
    try:
        ended = _end(key, stored, now)
    except REFUSED:
        ended = {}
        for attempt_id, values in stored.items():
            try:
                ended |= _end(key, {attempt_id: values}, now)
            except REFUSED as error:
                values |= {"result": None, **failure(refusal(error), "", retryable=True)}
                ended |= _end(key, {attempt_id: values}, now)
    return {
        attempt_id: values if ended[attempt_id] or _ended_as(key, attempt_id, values) else None
        for attempt_id, values in stored.items()
    }


def _end(key: WorkerKey, stored: dict[int, dict[str, Any]], now: datetime) -> dict[int, bool]:
    """End each attempt a worker of ``key`` holds with its values, in one transaction that
    signals the loop if any ended; per attempt, whether it did."""
    with transaction.atomic(using=queue_db()):
        ended = {
            attempt_id: bool(
                held(key, attempt_id, now).update(ended_at=now, exception_class_path="", **values)
            )
            for attempt_id, values in stored.items()
        }
        if any(ended.values()):
            signal(LOOP)
    return ended


def _ended_as(key: WorkerKey, attempt_id: int, values: dict[str, Any]) -> bool:
    """Return whether a worker of ``key`` ended the attempt with ``values`` already (the
    same report, its response lost)."""
    row = (
        Attempt.objects.filter(pk=attempt_id, worker__startswith=key_tag(key))
        .exclude(ended_at=None)
        .values(*values)
        .first()
    )
    return row == values


def _lock_held(key: WorkerKey, attempt_id: int) -> str:
    """Lock the attempt for the caller's transaction if a worker of ``key`` holds it
    (recovery, which would end it, waits); its job's id."""
    job_id = (
        held(key, attempt_id, clock.now())
        .select_for_update()
        .values_list("job_id", flat=True)
        .first()
    )
    if job_id is None:
        raise LeaseLost
    return job_id


@dataclass(eq=False)
class _Sleeper:
    """A claim waiting for work: the signals it had seen when it last looked, and what
    wakes it."""

    seen: int
    woken: threading.Event


class WorkBell:
    """The process's one listener for ``WORK``, which every waiting claim shares: a
    waiting claim holds neither a database connection nor a thread of its own beyond its
    request's. The thread stops (closing its connection) when nobody waited for a while.

    A signal wakes the waiting claims one after the other, not all at once: it wakes the
    longest waiting one that has not looked since the signal, and each claim, once it has
    looked (:meth:`pass_on`), wakes the next. The first claim so looks alone, without
    the others' claims competing for the CPU and the rows, and every claim still looks
    once per signal (claims differ in queues and functions: what one leaves may be
    another's)."""

    IDLE_EXIT = 2.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rings = 0
        self.sleepers: list[_Sleeper] = []
        self.thread: threading.Thread | None = None

    def ring_count(self) -> int:
        """Read before looking for work; pass it to :meth:`wait`: a signal that comes in
        between is not missed."""
        with self.lock:
            return self.rings

    def wait(self, seen: int, timeout: float) -> None:
        """Wait until woken for a ``WORK`` signal later than ``seen``, or ``timeout``
        seconds."""
        sleeper = _Sleeper(seen, threading.Event())
        with self.lock:
            if self.rings != seen:  # signalled since it looked: look again
                return
            self.sleepers.append(sleeper)
            self._ensure_thread()
        try:
            sleeper.woken.wait(timeout)
        finally:
            with self.lock:
                if sleeper in self.sleepers:
                    self.sleepers.remove(sleeper)

    def pass_on(self) -> None:
        """Called by a claim once it has looked for work: wake the next claim that has
        not looked since the last signal."""
        with self.lock:
            self._wake_next()

    def _wake_next(self) -> None:
        for sleeper in self.sleepers:
            if sleeper.seen != self.rings:
                self.sleepers.remove(sleeper)
                sleeper.woken.set()
                return

    def _ensure_thread(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._listen, name="ratequeue-bell", daemon=True)
            self.thread.start()

    def _ring(self) -> None:
        with self.lock:
            self.rings += 1
            self._wake_next()

    def _listen(self) -> None:
        self._ring()  # what was signalled before it listened went unheard: look
        waiter = Waiter((WORK,))
        idle_since = time.monotonic()
        try:
            while True:
                if waiter.wait(0.5):
                    self._ring()
                with self.lock:
                    if self.sleepers:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > self.IDLE_EXIT:
                        self.thread = None
                        return
        finally:
            waiter.close()
            connections[queue_db()].close()
            with self.lock:  # also after an error: the next waiter starts another
                if self.thread is threading.current_thread():
                    self.thread = None


bell = WorkBell()

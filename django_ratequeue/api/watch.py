"""The process's one watcher of the jobs its event streams follow (:mod:`.sse`).

A stream subscribes to its job (:meth:`Watcher.subscribe`) and waits for what the
watcher's one thread hands it: a :class:`Look` at the job whenever the job changed. When
it reads is the queue's wake-up protocol (:class:`..queue.wakeup.Waiter` on ``JOBS``);
docs/http-api.md ("Cost on the server") tells the cases and what they cost.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import reduce
from operator import or_
from typing import Any

from django.db import DatabaseError, connections
from django.db.models import F, OuterRef, Q, Subquery, Window
from django.db.models.functions import RowNumber

from django_ratequeue import clock
from django_ratequeue.api.serializers import job_error
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.jobs import JOBS, Status, Waiter
from django_ratequeue.models import DEFERRED_STATUSES, Job, OutputChunk
from django_ratequeue.plugins.eta.estimates import (
    ETA_FIELDS,
    Eta,
    job_etas,
    moved_materially,
    owner_view,
)
from django_ratequeue.threads import IdleExitThread

logger = logging.getLogger("django_ratequeue.api")

# Seconds without a signal after which every watched job is read anyway.
RECHECK = 1.0
# A watcher with no stream to serve for this long ends, closing its connections.
IDLE_EXIT = 1.0
# After a failed read (the database away), the next try waits this long.
RETRY_AFTER = 0.5
# Output chunks read per job and look at most (a stream far behind catches up over a few).
CHUNKS_PER_LOOK = 200
# The connections a watcher holds: one that reads, one that listens (PostgreSQL).
CONNECTIONS = 2
# Seconds between two estimates of a job's start (Look.eta) at least.
ETA_EVERY = 1.0
# The jobs whose start is estimated: those that have not started.
UNSTARTED = frozenset({Status.WAITING, *DEFERRED_STATUSES})


@dataclass(frozen=True)
class Look:
    """A job as one read found it, with the output chunks after the stream's cursor.

    ``more``: there are more chunks than those (the next look reads them)."""

    status: str
    attempts: int
    progress: Any
    result: Any
    error: str | None
    chunks: list[tuple[int, str]]
    more: bool = False
    eta: Eta | None = None


def read(cursors: dict[str, int], estimate: Iterable[str] = ()) -> dict[str, Look | None]:
    """Read the jobs ``cursors`` names, each with its chunks after its cursor, in two queries.

    ``None`` stands for a job there is none of any more. In that order: the output of an
    attempt is written before its outcome, so a final status read first means that every
    chunk is there to read. The jobs of ``estimate`` that have not started get their
    :class:`~..queue.eta.Eta` (a statement each, and a few for all)."""
    last_chunk = OutputChunk.objects.filter(job_id=OuterRef("pk")).order_by("-index")
    jobs = {
        job.pk: job
        for job in Job.objects.filter(pk__in=list(cursors))
        .only("status", "attempts", "progress", "result", "error", "owner", *ETA_FIELDS)
        .annotate(last_chunk=Subquery(last_chunk.values("index")[:1]))
    }
    wanted = set(estimate)
    etas = job_etas([job for pk, job in jobs.items() if pk in wanted and job.status in UNSTARTED])
    unread = {
        job_id: cursors[job_id]
        for job_id, job in jobs.items()
        if job.last_chunk is not None and job.last_chunk > cursors[job_id]
    }
    chunks = _chunks_after(unread, jobs)
    looks: dict[str, Look | None] = dict.fromkeys(cursors)
    for job_id, job in jobs.items():
        looks[job_id] = Look(
            status=job.status,
            attempts=job.attempts,
            progress=job.progress,
            result=job.result if job.status == Status.COMPLETE else None,
            error=job_error(job),
            chunks=chunks[job_id][:CHUNKS_PER_LOOK],
            more=len(chunks[job_id]) > CHUNKS_PER_LOOK,
            eta=owner_view(etas[job_id], job) if job_id in etas else None,
        )
    return looks


def _chunks_after(unread: dict[str, int], jobs: Iterable[str]) -> dict[str, list[tuple[int, str]]]:
    """Return the chunks after each cursor of ``unread``, a look's worth and one more."""
    chunks: dict[str, list[tuple[int, str]]] = {job_id: [] for job_id in jobs}
    if unread:
        after = reduce(or_, (Q(job_id=job_id, index__gt=n) for job_id, n in unread.items()))
        rank = Window(RowNumber(), partition_by=[F("job_id")], order_by=F("index").asc())
        rows = (
            OutputChunk.objects.filter(after)
            .annotate(rank=rank)
            .filter(rank__lte=CHUNKS_PER_LOOK + 1)
            .order_by("job_id", "index")
            .values_list("job_id", "index", "text")
        )
        for job_id, index, text in rows:
            chunks[job_id].append((index, text))
    return chunks


@dataclass(eq=False)
class Subscription:
    """One stream's hold on a job.

    Where its output is (the last chunk handed to it), what it was shown of the job, and
    how to hand it a :class:`Look` (from the watcher's thread; ``None`` ends the stream:
    the job is gone, or the watcher failed)."""

    job_id: str
    cursor: int
    deliver: Callable[[Look | None], None]
    shown: tuple[str, int, Any] | None = None
    eta_shown: Eta | None = None

    def hand(self, look: Look | None) -> None:
        """Hand ``look`` on with the chunks this stream has not had, unless nothing is new.

        Its estimate goes with it only when it moved materially since the one shown."""
        if look is None:
            self.deliver(None)
            return
        chunks = [chunk for chunk in look.chunks if chunk[0] > self.cursor]
        shown = (look.status, look.attempts, look.progress)
        eta = look.eta
        if eta is not None and not moved_materially(self.eta_shown, eta, clock.now()):
            eta = None
        if not chunks and shown == self.shown and eta is None:
            return
        self.shown = shown
        if eta is not None:
            self.eta_shown = eta
        if chunks:
            self.cursor = chunks[-1][0]
        self.deliver(replace(look, chunks=chunks, eta=eta))


@dataclass
class _Reads:
    """When the watcher's thread last read every watched job, and whether it is to again."""

    every: bool = True  # read every watched job: nothing was read yet
    last_every: float = -math.inf
    now: float = 0.0  # when the thread last looked at what is due


class Watcher:
    """Read the watched jobs when they change, and hand each stream what it has not seen.

    It is the process's watcher thread, started by the first subscription and ended a
    second after the last one went. However many streams there are, it reads every job
    that changed in one query (and their new output in one more), on its own connection.
    A ``JOBS`` signal with an id has it read that job; an empty one, or a wait that ran
    out (``RECHECK``), every watched job (at most once per ``POLL_INTERVAL``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.subscriptions: dict[str, list[Subscription]] = {}
        # Jobs to read at the next turn: newly watched, signalled, or with more output.
        self.due: set[str] = set()
        self.waiter: Waiter | None = None
        self.daemon = IdleExitThread(
            self.run, name="ratequeue-events", lock=self.lock, idle_exit=IDLE_EXIT
        )
        # Set by a new subscription: ends the wait of a watcher that has none.
        self.woken = threading.Event()
        # When each watched job's start was last estimated (monotonic): once per ETA_EVERY.
        self.estimated: dict[str, float] = {}

    def subscribe(
        self, job_id: str, cursor: int, deliver: Callable[[Look | None], None]
    ) -> Subscription:
        """Watch ``job_id`` for a stream that has its output up to chunk ``cursor``.

        The first look comes at once, the next ones when the job changes."""
        subscription = Subscription(job_id, cursor, deliver)
        with self.lock:
            self.subscriptions.setdefault(job_id, []).append(subscription)
            self.due.add(job_id)
            if not self.daemon.running:
                self.waiter = Waiter((JOBS,), interruptible=True)
                self.daemon.start()
            else:
                assert self.waiter is not None
                self.waiter.interrupt()
            self.woken.set()
        return subscription

    @property
    def thread(self) -> threading.Thread | None:
        """Return the watcher's thread, or ``None`` when it is not running."""
        return self.daemon.thread

    def unsubscribe(self, subscription: Subscription) -> None:
        """Hand the stream nothing more: it ended (or its client went away)."""
        with self.lock:
            streams = self.subscriptions.get(subscription.job_id, [])
            if subscription in streams:
                streams.remove(subscription)
            if not streams:
                self.subscriptions.pop(subscription.job_id, None)
                self.estimated.pop(subscription.job_id, None)
            if not self.subscriptions and self.waiter is not None:
                self.waiter.interrupt()  # to end within IDLE_EXIT, not after its wait

    def run(self) -> None:
        """Run the thread: read what is due, else wait for a signal or the periodic look.

        End IDLE_EXIT seconds after the last stream went, or at once on an error other
        than the database's (those are waited out), ending every stream."""
        assert self.waiter is not None
        waiter = self.waiter
        reads = _Reads()
        try:
            while (taken := self.take_due(reads)) is not None:
                due, watched = taken
                if due:
                    self.look_at(due)
                elif not watched:  # nothing to read: wait for a stream, not for the database
                    self.woken.wait(IDLE_EXIT)
                    self.woken.clear()
                    reads.every = True
                else:
                    self.wait_for_signal(waiter, reads)
        except Exception:
            logger.exception("The event streams' watcher failed; ending its streams")
            self.end_streams()
        finally:
            waiter.release()
            connections.close_all()

    def end_streams(self) -> None:
        """End every stream, and this thread: the next subscription starts another.

        A stream handed ``None`` ends without an event; its client reconnects and
        resumes from the last event it had, with a new subscription."""
        with self.lock:
            streams = [s for subscriptions in self.subscriptions.values() for s in subscriptions]
            self.subscriptions.clear()
            self.due, self.estimated, self.waiter = set(), {}, None
            self.daemon.end_now()
        for subscription in streams:
            subscription.deliver(None)

    def take_due(self, reads: _Reads) -> tuple[set[str], set[str]] | None:
        """Take the jobs due for a read, and those watched; None when the thread ends."""
        reads.now = time.monotonic()
        with self.lock:
            if self.subscriptions:
                self.daemon.keep_alive()
            elif self.daemon.end_if_idle():
                self.waiter = None
                return None
            every_due = reads.every and reads.now - reads.last_every >= self.every_interval
            watched = set(self.subscriptions)
            due = watched if every_due else self.due & watched
            self.due = set()
        if every_due:
            reads.every, reads.last_every = False, reads.now
        return due, watched

    def wait_for_signal(self, waiter: Waiter, reads: _Reads) -> None:
        """Wait for the jobs' signal or the periodic look, and note what it makes due."""
        timeout = RECHECK
        if reads.every:  # due, but read too recently: the rest of the interval
            timeout = reads.last_every + self.every_interval - reads.now
        try:
            signalled = waiter.wait(timeout)
        except DatabaseError:  # SQLite's poll: its database away
            self.lost_database()
            reads.every = True
            return
        payloads = waiter.received()
        if not signalled and not reads.every:
            reads.every = True  # the periodic look, for a signal missed
        elif payloads is None or "" in payloads:
            reads.every = True
        else:
            with self.lock:
                self.due |= payloads

    def lost_database(self) -> None:
        """Log the lost database, and wait a little: the next read opens a new connection."""
        logger.warning("The event streams' watcher lost the database", exc_info=True)
        connections.close_all()
        time.sleep(RETRY_AFTER)

    @property
    def every_interval(self) -> float:
        """Reads of every watched job come at most this often."""
        return ratequeue_settings().POLL_INTERVAL

    def look_at(self, job_ids: Iterable[str]) -> None:
        """Read ``job_ids`` and hand each of their streams its part."""
        with self.lock:
            streams = {job_id: list(self.subscriptions.get(job_id, ())) for job_id in job_ids}
        cursors = {job_id: min(s.cursor for s in subs) for job_id, subs in streams.items() if subs}
        now = time.monotonic()
        estimate = {j for j in cursors if now - self.estimated.get(j, -math.inf) >= ETA_EVERY}
        try:
            looks = read(cursors, estimate)
        except DatabaseError:
            self.lost_database()
            with self.lock:
                self.due |= set(cursors)
            return
        with self.lock:
            self.estimated.update(dict.fromkeys(estimate & set(self.subscriptions), now))
        for job_id, look in looks.items():
            if look is not None and look.more:
                with self.lock:
                    self.due.add(job_id)
            for subscription in streams[job_id]:
                subscription.hand(look)


watcher = Watcher()

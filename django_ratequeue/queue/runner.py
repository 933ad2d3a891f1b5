"""Runners: what serves the queue in each django-q2 worker process.

A runner is a thread that :mod:`.host` starts in every worker process of a cluster, beside
the agent. It runs attempts in the slots of its process (``RATEQUEUE["SLOTS"]`` at once,
see :mod:`django_ratequeue.slots`): it claims as many dispatched attempts as it has free
slots, the highest priority first, with one UPDATE that skips rows other runners are
claiming (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite writes one at a time), and
starts each in a slot. As calls end it reports their outcomes, those that ended together
in one statement that signals the loop, before it claims again: so a slot takes more work
only once the outcome of its last is recorded, and a worker that dies re-runs only what
was in its slots. When nothing is left to claim it waits for the loop's ``WORK`` signal,
an end, or :data:`IDLE_LOOK` seconds. When its process stops it claims nothing more,
gives the calls in its slots ``STOP_GRACE`` seconds to end, and hands back the others.

Only attempt ids go through the database (never client data). A claim takes attempts
nobody's yet and not ended, so an attempt that already ran or was recovered never runs
again.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from contextlib import nullcontext
from datetime import timedelta
from functools import cache, partial
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q

from .. import clock
from ..conf import ratequeue_settings
from ..exceptions import AttemptTimedOut, class_path
from ..slots import Finished, Slots
from .bulk import update_rows
from .execution import REFUSED, finish, prepare, refusal, run_attempt
from .models import REPORT_FIELDS, Attempt, Job, Outcome, queue_connection
from .wakeup import LOOP, WORK, Waiter, notifies, notify_clause, signal

logger = logging.getLogger(__name__)
T = TypeVar("T")
# How often a runner with attempts in its slots looks for cancels of their jobs.
CANCEL_LOOK = 1.0
# How long an idle runner waits for a signal before it looks for work all the same.
IDLE_LOOK = 5.0


_slots: Slots | None = None
_slots_lock = threading.Lock()


def process_slots() -> Slots:
    """The slots of this process, shared by its runners one after the other."""
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = Slots(
                ratequeue_settings().SLOTS,
                on_finish=lambda finished: None,
                name="ratequeue-slot",
                interrupt_with=AttemptTimedOut,
            )
        return _slots


class Runner:
    """Claims attempts for its free slots, starts them, and reports them as they end."""

    def __init__(self, worker: str, slots: Slots | None = None) -> None:
        self.worker = worker
        self.slots = slots or process_slots()
        self.slots.on_finish = self.ended
        self.held: dict[Hashable, Attempt] = {}
        self.finished: queue.SimpleQueue[tuple[Finished, float]] = queue.SimpleQueue()
        self.waiter = Waiter((WORK,), interruptible=True)
        self.canceled: set[Hashable] = set()
        self.next_cancel_look = 0.0

    def ended(self, finished: Finished) -> None:
        """Take the end of a call (from the slot that ran it) for the next report."""
        self.finished.put((finished, time.monotonic()))
        self.waiter.interrupt()

    def serve(self, stopping: threading.Event, grace: float) -> None:
        """Claim, start and report until ``stopping`` is set; then give the attempts in
        the slots ``grace`` seconds to end, and hand back the others."""
        while not stopping.is_set():
            try:
                if not self.turn():
                    self.waiter.wait(CANCEL_LOOK if self.held else IDLE_LOOK)
            except Exception:
                logger.exception("A runner's turn failed; taking the next one")
                time.sleep(1.0)
        self.finish_held(time.monotonic() + grace)
        self.hand_back()

    def stop(self, stopping: threading.Event) -> None:
        """Tell the runner (from another thread) to stop: it ends its wait at once."""
        stopping.set()
        self.waiter.interrupt()

    def turn(self) -> bool:
        """Report what ended, then claim and start attempts for the free slots; whether
        it took all it asked for (more may wait)."""
        self.report_ended()
        self.look_for_cancels()
        free = self.slots.free
        if free <= 0:
            return False
        claimed = self.claim(free)
        for attempt in claimed:
            self.start(attempt)
        return len(claimed) == free

    def start(self, attempt: Attempt) -> None:
        """Start a claimed attempt in a free slot; one whose call cannot be made (an
        unknown function, malformed arguments) ends at once."""
        try:
            call = prepare(attempt)
        except Exception as exc:
            self.report([finish(attempt, Finished(attempt.pk, error=exc))])
            return
        self.held[attempt.pk] = attempt
        self.slots.start(call)

    def report_ended(self) -> int:
        """Report the attempts whose calls ended since the last report; how many."""
        ended = []
        while not self.finished.empty():
            finished, heard = self.finished.get()
            attempt = self.held.pop(finished.key, None)
            self.canceled.discard(finished.key)
            if attempt is None:
                continue
            # When the call really ended: the slot's reading, on the queue's clock.
            ago = max(heard - finished.ended, 0.0) + (time.monotonic() - heard)
            ended.append(finish(attempt, finished, clock.now() - timedelta(seconds=ago)))
        self.report(ended)
        return len(ended)

    def look_for_cancels(self) -> None:
        """Pass a cancel on to the calls of canceled jobs (at most every ``CANCEL_LOOK``
        seconds): an async job's task is cancelled, a plain function sees
        ``cancel_requested()``."""
        if not self.held or time.monotonic() < self.next_cancel_look:
            return
        self.next_cancel_look = time.monotonic() + CANCEL_LOOK
        keys = {attempt.job_id: key for key, attempt in self.held.items()}
        asked = Job.objects.filter(pk__in=keys, cancel_requested=True).values_list("pk", flat=True)
        for job_id in through_reconnects(lambda: list(asked)):
            if keys[job_id] not in self.canceled:
                self.canceled.add(keys[job_id])
                self.slots.cancel(keys[job_id])

    def finish_held(self, deadline: float) -> None:
        """Take no more work, and report the attempts in the slots as they end, until
        ``deadline`` (a ``time.monotonic()`` reading)."""
        while self.held and (left := deadline - time.monotonic()) > 0:
            self.report_ended()
            self.look_for_cancels()
            if self.held:
                self.waiter.wait(min(left, CANCEL_LOOK))
        self.report_ended()

    def hand_back(self) -> None:
        """Hand back the attempts still in the slots as the process stops: they are not
        tries, and another runner may claim them at once (this one's calls end with its
        process)."""
        if not self.held:
            return
        ids = [attempt.pk for attempt in self.held.values()]
        logger.warning("Stopping: handing back %d running attempt(s)", len(ids))

        def release() -> None:
            Attempt.objects.filter(pk__in=ids, worker=self.worker, ended_at=None).update(
                worker="", started_at=None
            )
            signal(WORK)

        through_reconnects(release)
        self.held.clear()

    def drain(self) -> int:
        """Claim and run attempts in this thread, one at a time, until nothing is left to
        claim; how many ran. The in-process step of tests: what a runner does, without
        its threads."""
        ran = 0
        while claimed := self.claim(1):
            for attempt in claimed:
                self.report([run_attempt(attempt)])
                ran += 1
        return ran

    def close(self) -> None:
        self.waiter.close()

    def claim(self, limit: int = 1) -> list[Attempt]:
        """Take up to ``limit`` dispatched attempts nobody claimed yet, started now, the
        highest priority first, then in dispatch order: so a free slot never starts a
        lower priority while a higher one waits. One durable statement, which on
        PostgreSQL also returns what the attempts run. Through lost connections: claiming
        again also finds what a first try may have taken before its connection broke."""
        connection = queue_connection()
        stamp = clock.now()
        params: list[Any] = [limit, self.worker, connection.ops.adapt_datetimefield_value(stamp)]

        def take() -> list[Attempt]:
            with connection.cursor() as cursor:
                cursor.execute(_claim_sql(connection.vendor), params)
                rows = cursor.fetchall()
            if connection.vendor == "postgresql" and rows:
                return sorted(map(_claimed, rows), key=lambda a: (-a.job.priority, a.pk))
            # SQLite returns the attempts' own columns only: read the rest. What a first
            # try took before its connection broke comes back the same way: claimed by
            # us, not started, or started by that very claim.
            taken = Q(pk__in=[row[0] for row in rows]) | Q(started_at=stamp)
            return list(
                Attempt.objects.filter(taken, worker=self.worker, ended_at=None, active=True)
                .select_related("job")
                .only(
                    "timeout",
                    "queue",
                    "started_at",
                    "job__func",
                    "job__args",
                    "job__kwargs",
                    "job__priority",
                )
                .order_by("-job__priority", "pk")
            )

        return through_reconnects(take)

    def report(self, attempts: list[Attempt]) -> None:
        """Write the outcomes of attempts that ran, with their start times should a
        database crash have lost one, and signal the loop, which takes them in (through
        lost connections, see :func:`through_reconnects`).

        Should the database refuse the statement (a value that slipped past the checks
        of :mod:`.bounds`), each row is written on its own, and one it still refuses is
        written as a failure that says why: the others of the chunk are not held up, and
        no attempt stays running for good."""
        if not attempts:
            return
        try:
            through_reconnects(partial(self.write, attempts))
        except REFUSED:
            for attempt in attempts:
                try:
                    through_reconnects(partial(self.write, [attempt]))
                except REFUSED as error:
                    attempt.outcome, attempt.result = Outcome.FAILED, None
                    attempt.error, attempt.traceback = refusal(error), ""
                    attempt.exception_class_path = class_path(type(error))
                    through_reconnects(partial(self.write, [attempt]))

    def write(self, attempts: list[Attempt]) -> None:
        """Write the outcomes of ``attempts`` with one statement that signals the loop; in
        a savepoint within a transaction, which a refused statement must not abort."""
        connection = queue_connection()
        nested = connection.in_atomic_block
        with transaction.atomic(using=connection.alias) if nested else nullcontext():
            update_rows(
                Attempt,
                attempts,
                REPORT_FIELDS,
                # A recovered (superseded) attempt already ended: its late report is ignored.
                condition="t.ended_at IS NULL",
                # The loop's signal, raised by the statement itself (SQLite: none, it polls).
                returning=notify_clause(LOOP) if notifies() else "",
            )


@cache
def _claim_sql(vendor: str) -> str:
    """The claim of up to n dispatched attempts nobody's yet, by priority then dispatch
    order, for worker w, started at s if not None (parameters: n, w, s); remote attempts
    are left to remote workers. The candidates are picked once, in a CTE (a subquery
    under ``IN`` may be run again per row, and pick more than n). On PostgreSQL, rows
    another runner is claiming at the same moment are skipped, not waited for, and the
    statement returns what the attempts are to run."""
    connection = queue_connection()
    attempts = connection.ops.quote_name(Attempt._meta.db_table)
    jobs = connection.ops.quote_name(Job._meta.db_table)
    postgresql = vendor == "postgresql"
    lock = " FOR UPDATE OF a SKIP LOCKED" if postgresql else ""
    returning = f"{attempts}.id"
    source = "picked"
    where = f"{attempts}.id = picked.id"
    if postgresql:
        returning += f", {', '.join(f'{attempts}.{c}' for c in CLAIMED_ATTEMPT)}"
        returning += f", {', '.join(f'j.{c}' for c in CLAIMED_JOB)}"
        source += f", {jobs} j"
        where += f" AND j.id = {attempts}.job_id"
    return (
        f"WITH picked AS{' MATERIALIZED' if postgresql else ''} ("
        f"SELECT a.id FROM {attempts} a JOIN {jobs} j ON j.id = a.job_id"
        f" WHERE a.active AND NOT a.remote AND a.worker = '' AND a.ended_at IS NULL"
        f" ORDER BY j.priority DESC, a.id LIMIT %s{lock}"
        f") UPDATE {attempts} SET worker = %s, started_at = %s FROM {source}"
        f" WHERE {where} AND {attempts}.worker = '' AND {attempts}.ended_at IS NULL"
        f" RETURNING {returning}"
    )


# The columns a PostgreSQL claim returns, after the attempt's id.
CLAIMED_ATTEMPT = ("job_id", "timeout", "queue", "started_at")
CLAIMED_JOB = ("func", "args", "kwargs", "priority")


def _claimed(row: tuple[Any, ...]) -> Attempt:
    """An attempt as a PostgreSQL claim returned it, with the part of its job it runs."""
    values = dict(zip(("id", *CLAIMED_ATTEMPT), row, strict=False))
    job_values = dict(zip(CLAIMED_JOB, row[1 + len(CLAIMED_ATTEMPT) :], strict=True))
    for name in ("args", "kwargs"):  # JSON text, as Django's psycopg backend reads it
        if isinstance(job_values[name], str):
            job_values[name] = json.loads(job_values[name])
    attempt = Attempt(**values)
    attempt.job = Job(id=values["job_id"], **job_values)
    return attempt


def through_reconnects(action: Callable[[], T]) -> T:
    """Run ``action``, which may be repeated, until it gets through: after a lost database
    connection (a restart) on a new one. A claim or a report must not be dropped while
    this worker lives, since nobody else would end those attempts (recovery waits for dead
    workers and timeouts). Should the database stay away, django-q2's timeout ends this
    worker, and recovery then takes its attempts as lost."""
    pause = 0.05
    connection = queue_connection()
    while True:
        try:
            return action()
        except (OperationalError, InterfaceError):
            if connection.in_atomic_block:
                raise
            logger.warning("Lost the database connection; trying again", exc_info=True)
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

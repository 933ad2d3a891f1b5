"""Running attempts on a django-q2 worker.

``run_batch`` receives attempt ids only (never client data). Attempts are claimed with a
conditional UPDATE (nobody's yet, not ended), so an attempt that already ran or was
recovered never runs again, even when django-q2 delivers the same task twice, and each
records its start time as it really starts. A job that raises ``SystemExit`` or
``KeyboardInterrupt`` fails like any other; the worker and the rest of its batch go on.
When its own batch is done, the runner runs the resting loop's next pass itself, and else
takes over attempts that were dispatched but not claimed yet (other batches still queued),
so one slow job does not hold up the jobs dealt to its batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import cache
from typing import TypeVar

from django.db import InterfaceError, OperationalError
from django.db.models import Case, DateTimeField, Q, Value, When

from .. import clock
from ..conf import ratequeue_settings
from ..db import ServerStatement, sql_to_run
from .bulk import update_rows
from .execution import run_attempt
from .loop import take_pass, take_resting_pass
from .models import Attempt, queue_connection
from .wakeup import wake_loop
from .watchdog import beat

logger = logging.getLogger(__name__)
T = TypeVar("T")


def main_loop(generation: int) -> bool:
    """The django-q2 task of a pass of the main loop (:data:`.wakeup.LOOP_TASK`): the pass
    after ``generation``, then, this worker being free, the batch the pass kept, which
    saves a broker round trip on the way from enqueue to start. False at once if another
    pass already took over from ``generation``."""
    loop = take_pass(generation)
    if loop is None:
        return False
    loop.run()
    if loop.inline_batch:
        run_batch(loop.inline_batch, until=loop.until)
    return True


def run_batch(attempt_ids: list[int], until: float | None = None) -> None:
    """The django-q2 task: run the given attempts, then help with undelivered ones.

    When its attempts freed slots and the loop rests, this worker, about to go idle, runs
    the loop's next pass itself before it helps others (the pass deals new work to every
    worker, so they keep busy meanwhile), then that pass's own batch, and so on while the
    task is younger than half a lease (or than ``until``, a ``time.monotonic()``): each
    turn saves two broker round trips, the kick's and the batch's."""
    global _chunk
    if until is None:
        until = time.monotonic() + ratequeue_settings().LOOP_LEASE / 2
    # Through reconnects from the first statement on: this worker's connection may have
    # been cut while it waited for the task (a database restart), and a batch that fails
    # here leaves its attempts dispatched with nobody to run them.
    runner = Runner(through_reconnects(beat), _chunk)
    while attempt_ids:
        runner.run(attempt_ids)
        attempt_ids = runner.next_pass(until)
        if not attempt_ids:
            runner.help()
            attempt_ids = runner.next_pass(until)
    runner.wake()
    _chunk = runner.chunk


# The chunk size this worker process's last batch ended with: the next batch starts there.
_chunk = 1


class Runner:
    """Claims, runs and reports attempts in chunks.

    A chunk is claimed with one conditional UPDATE, each of its attempts records its
    start with a short one as it really starts (so that its start time is true, and known
    should the worker die), and their outcomes are reported with one statement. It
    doubles (up to ``MAX_CHUNK``) while jobs finish quickly and falls back to one attempt
    after a slow chunk, so quick jobs share their claims and reports while a slow job
    holds others back at most once in a row. A worker's next batch starts with the chunk
    its last one ended with.
    """

    MAX_CHUNK = 32
    QUICK = 0.005

    def __init__(self, worker: str, chunk: int = 1) -> None:
        self.worker = worker
        self.chunk = chunk
        self.unreported = False
        self.last_wake = time.monotonic()

    def run(self, attempt_ids: list[int]) -> None:
        """Run a batch: chunk after chunk of :meth:`next_chunk`, from the batch or of a
        higher priority than its attempts, until nobody's are left in it. When a chunk
        was another batch's, what is left of this one is read again: whoever claimed
        its attempts runs them."""
        todo = list(attempt_ids)
        while todo:
            taken = self.next_chunk()
            if not taken:
                return  # every attempt of the batch was claimed, by us or another runner
            self.run_chunk(taken)
            rest = [pk for pk in todo if pk not in taken]
            if rest and not set(taken) <= set(todo):
                rest = self.unclaimed(rest)
            todo = rest

    def help(self) -> None:
        """Run attempts dealt to batches that are still queued, or whose worker is busy."""
        for _ in range(ratequeue_settings().DISPATCH_BATCH_SIZE):
            spare = self.next_chunk()
            if not spare:
                break
            self.run_chunk(spare)

    def next_chunk(self) -> list[int]:
        """The ``chunk`` unclaimed attempts to run next, whichever batch they were dealt to:
        by priority, then dispatch order. So a free worker never starts a lower priority
        while a higher one waits in the batch of a busy worker. Through lost connections,
        as claims and reports are (:func:`through_reconnects`): it is a batch's first read."""
        unclaimed = (
            Attempt.objects.filter(active=True, worker="", ended_at=None)
            .order_by("-job__priority", "pk")
            .values_list("pk", flat=True)
        )
        return through_reconnects(lambda: list(unclaimed[: self.chunk]))

    def unclaimed(self, attempt_ids: list[int]) -> list[int]:
        """Those of ``attempt_ids`` nobody has claimed yet (through lost connections)."""
        query = Attempt.objects.filter(pk__in=attempt_ids, worker="", ended_at=None)
        return through_reconnects(lambda: list(query.values_list("pk", flat=True)))

    def next_pass(self, until: float) -> list[int]:
        """If this runner freed slots and the loop rests, run its next pass here; returns
        that pass's own batch (empty when there is no pass to run, or it started nothing
        for this worker)."""
        if not self.unreported or time.monotonic() >= until:
            return []
        loop = take_resting_pass()
        if loop is None:
            return []
        self.unreported = False  # the pass sees them at its first step
        loop.work(until - time.monotonic())
        return loop.inline_batch

    def run_chunk(self, taken: list[int]) -> None:
        """Claim the attempts ``taken`` (those nobody claimed yet), start and run them one
        after the other, and report them together.

        Should something stop this process in the middle (a ``BaseException`` that is not
        the job's own ``SystemExit`` or ``KeyboardInterrupt``), the attempts that ran are
        reported first and the claimed ones that did not start are handed back: they wait
        again, and none of them counts as a try."""
        claimed = self.claim(taken)
        ran: list[Attempt] = []
        began = time.monotonic()
        try:
            for attempt in claimed:
                if attempt.started_at is not None or self.start(attempt):
                    ran.append(attempt)
                    run_attempt(attempt)
        except BaseException:
            self.report([attempt for attempt in ran if attempt.ended_at is not None])
            self.release([attempt.pk for attempt in claimed if attempt.started_at is None])
            raise
        quick = time.monotonic() - began < self.QUICK * max(len(ran), 1)
        self.chunk = min(self.chunk * 2, self.MAX_CHUNK) if quick else 1
        self.report(ran)
        self.unreported = self.unreported or bool(ran)
        # After a slow job at once; after quick ones at most every SEGMENT seconds.
        if time.monotonic() - self.last_wake >= ratequeue_settings().SEGMENT:
            self.wake()

    def report(self, attempts: list[Attempt]) -> None:
        """Write the outcomes of attempts that ran, with their start times should a
        database crash have lost one (through lost connections, see
        :func:`through_reconnects`)."""
        through_reconnects(
            lambda: update_rows(
                Attempt,
                attempts,
                [
                    "started_at",
                    "ended_at",
                    "outcome",
                    "result",
                    "error",
                    "traceback",
                    "exception_class_path",
                ],
                # A recovered (superseded) attempt already ended: its late report is ignored.
                condition="t.ended_at IS NULL",
            )
        )

    def claim(self, attempt_ids: list[int]) -> list[Attempt]:
        """Take the attempts nobody claimed yet (``worker`` empty); an attempt that
        already ran, was claimed by another worker, or was recovered is skipped, so a task
        django-q2 delivers twice runs nothing twice. One durable UPDATE for the chunk, which
        also starts its first attempt (so a chunk of one, a slow job's, costs no more), and
        claiming again after a lost connection finds what the first try may have taken."""
        if not attempt_ids:
            return []
        first, stamp = min(attempt_ids), clock.now()

        def take() -> list[Attempt]:
            Attempt.objects.filter(
                pk__in=attempt_ids, worker="", started_at=None, ended_at=None
            ).update(
                worker=self.worker,
                started_at=Case(
                    When(pk=first, then=Value(stamp)), default=None, output_field=DateTimeField()
                ),
            )
            return list(
                Attempt.objects.filter(
                    Q(started_at=None) | Q(pk=first, started_at=stamp),
                    pk__in=attempt_ids,
                    worker=self.worker,
                    ended_at=None,
                )
                .select_related("job")
                .only("timeout", "queue", "started_at", "job__func", "job__args", "job__kwargs")
                .order_by("pk")
            )

        return through_reconnects(take)

    def start(self, attempt: Attempt) -> bool:
        """Record that a claimed attempt starts now, unless it was ended meanwhile (a
        cancel). Each attempt gets its true start time, and should this worker die, the
        attempts of its chunk that had not started are known: they are not tries. One
        short statement per job; on PostgreSQL it does not wait for the WAL flush (the
        claim, which makes the attempt ours, did; the report writes the time again)."""
        stamp = clock.now()
        connection = queue_connection()
        params = [connection.ops.adapt_datetimefield_value(stamp), attempt.pk, self.worker]
        statement = _start_statement(
            connection.vendor == "postgresql" and not connection.in_atomic_block
        )

        def take() -> int:
            with connection.cursor() as cursor:
                cursor.execute(sql_to_run(connection, statement), params)
                return cursor.rowcount

        if not through_reconnects(take):
            return False
        attempt.started_at = stamp
        return True

    def release(self, attempt_ids: list[int]) -> None:
        """Hand back claimed attempts that did not start, for another runner (or the
        loop's recovery, see :func:`.transitions.recover`) to take."""
        Attempt.objects.filter(
            pk__in=attempt_ids, worker=self.worker, started_at=None, ended_at=None
        ).update(worker="")

    def wake(self) -> None:
        """Tell the loop that slots came free."""
        if self.unreported:
            wake_loop()
            self.unreported = False
        self.last_wake = time.monotonic()


@cache
def _start_statement(async_commit: bool) -> ServerStatement:
    """The start of a claimed attempt, in plain SQL, prepared on the server from a
    session's second use (see :mod:`django_ratequeue.db`): the ORM, and planning the
    statement each time, would cost more than running it."""
    table = queue_connection().ops.quote_name(Attempt._meta.db_table)
    text = "UPDATE {} SET started_at = {} WHERE id = {} AND worker = {} AND ended_at IS NULL{}"
    relax = " RETURNING set_config('synchronous_commit', 'off', true)" if async_commit else ""
    return ServerStatement(
        name=f"ratequeue_start_attempt{'_async' if async_commit else ''}",
        text=text.format(table, "%s", "%s", "%s", relax),
        prepared_text=text.format(table, "$1", "$2", "$3", relax),
        arguments="%s, %s, %s",
    )


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

"""Runners: what serves the queue in each django-q2 worker process.

A runner is a thread that :mod:`.host` starts beside the agent. It claims dispatched
attempts for the free slots of its process's pool (:mod:`.pool`), starts them,
and reports their outcomes before it claims again, through the attempt protocol
(:mod:`.protocol`). docs/concepts.md ("Runners") tells when it claims, waits and stops.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Hashable
from datetime import datetime, timedelta

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.execution import finish, prepare, run_attempt, settle
from django_ratequeue.engine.models import Attempt, Job
from django_ratequeue.engine.pool import Finished, Pool
from django_ratequeue.engine.protocol import (
    Claimant,
    Ended,
    Report,
    claim_local,
    release,
    report,
    through_reconnects,
)
from django_ratequeue.engine.registry import known_paths
from django_ratequeue.engine.roster import runner_channel
from django_ratequeue.engine.wakeup import WORK, Waiter
from django_ratequeue.exceptions import AttemptTimedOut, UnknownJob, describe

logger = logging.getLogger(__name__)
# How often a runner with attempts in its slots looks for cancels of their jobs.
CANCEL_LOOK = 1.0
# How long an idle runner waits for a signal before it looks for work all the same.
IDLE_LOOK = 5.0


_pool: Pool | None = None
_pool_lock = threading.Lock()


def process_pool() -> Pool:
    """Return the pool of this process, shared by its runners one after the other."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool(
                ratequeue_settings().SLOTS,
                on_finish=lambda finished: None,
                name="ratequeue-slot",
                interrupt_with=AttemptTimedOut,
            )
        return _pool


class Runner:
    """Claim attempts for the free slots, start them, and report them as they end."""

    def __init__(self, worker: str, pool: Pool | None = None) -> None:
        self.worker = worker
        self.claimant = Claimant(worker)
        self.pool = pool or process_pool()
        self.pool.on_finish = self.ended
        self.held: dict[Hashable, Attempt] = {}
        # The ends of calls, made plain in their slots: (key, report, ended, heard), the
        # last two ``time.monotonic()`` readings.
        self.finished: queue.SimpleQueue[tuple[Hashable, Report, float, float]] = (
            queue.SimpleQueue()
        )
        # Ended attempts whose report has not been taken yet (the database was away).
        self.unreported: list[Ended] = []
        # Woken with every runner (WORK) or alone, for the attempts a step meant for it.
        self.waiter = Waiter((WORK, runner_channel(worker)), interruptible=True)
        self.canceled: set[Hashable] = set()
        self.next_cancel_look = 0.0
        # Whether attempts may wait to be claimed: a WORK signal came, a wait ran out, or
        # the last claim took all it asked for. A call's end alone is no reason to claim.
        self.may_have_work = True

    def ended(self, finished: Finished) -> None:
        """Take the end of a call for the next report, made plain in the slot that ran it."""
        self.finished.put((finished.key, settle(finished), finished.ended, time.monotonic()))
        self.waiter.interrupt()

    def serve(self, stopping: threading.Event, grace: float) -> None:
        """Claim, start and report until ``stopping`` is set; then finish or hand back.

        The attempts in the slots are given ``grace`` seconds to end; the others are
        handed back."""
        while not stopping.is_set():
            try:
                if not self.turn():
                    woken = self.waiter.wait(CANCEL_LOOK if self.held else IDLE_LOOK)
                    self.may_have_work |= not woken or self.waiter.took_signal()
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
        """Report what ended, then claim and start attempts for the free slots.

        Return whether it took all it asked for (more may wait)."""
        self.report_ended()
        self.look_for_cancels()
        free = self.pool.free
        if free <= 0 or not self.may_have_work:
            return False
        claimed = self.claim(free)
        for attempt in claimed:
            self.start(attempt)
        self.may_have_work = len(claimed) == free
        return self.may_have_work

    def start(self, attempt: Attempt) -> None:
        """Start a claimed attempt in a free slot.

        One whose function this process does not know is handed back, no try: it waits for
        a worker that knows it. One whose call cannot be made otherwise (malformed
        arguments) ends at once."""
        try:
            call = prepare(attempt)
        except UnknownJob:
            logger.warning("Handing back attempt %s: its function is not known here", attempt.pk)
            through_reconnects(lambda: release(self.claimant, [attempt.pk]))
            return
        except Exception as exc:
            self.report([finish(attempt, settle(Finished(attempt.pk, error=exc)))])
            return
        self.held[attempt.pk] = attempt
        self.pool.start(call)

    def report_ended(self) -> int:
        """Report the attempts whose calls ended since the last report; return how many.

        Those a failed report left are reported again first: an attempt that ended is
        never left running."""
        ended = self.unreported
        while not self.finished.empty():
            key, outcome, ended_at, heard = self.finished.get()
            attempt = self.held.pop(key, None)
            self.canceled.discard(key)
            if attempt is None:
                continue
            # When the call really ended: the slot's reading, on the queue's clock.
            ago = max(heard - ended_at, 0.0) + (time.monotonic() - heard)
            ended.append(self.ending(attempt, outcome, clock.now() - timedelta(seconds=ago)))
        self.unreported = ended
        self.report(ended)
        self.unreported = []
        return len(ended)

    def ending(self, attempt: Attempt, outcome: Report, ended_at: datetime) -> Ended:
        """Return how ``attempt`` ended; failed with the error if recording it raises.

        One attempt's trouble never holds up the others ending in the same turn."""
        try:
            return finish(attempt, outcome, ended_at)
        except Exception as error:
            logger.exception("Could not record the end of attempt %s", attempt.pk)
            failed = Report.failed(f"The attempt's end could not be recorded: {describe(error)}")
            return Ended(attempt.pk, failed, ended_at, attempt.started_at)

    def look_for_cancels(self) -> None:
        """Pass cancels on to the calls of canceled jobs, at most every ``CANCEL_LOOK`` seconds.

        An async job's task is cancelled, a plain function sees ``cancel_requested()``."""
        if not self.held or time.monotonic() < self.next_cancel_look:
            return
        self.next_cancel_look = time.monotonic() + CANCEL_LOOK
        keys = {attempt.job_id: key for key, attempt in self.held.items()}
        asked = Job.objects.filter(pk__in=keys, cancel_requested=True).values_list("pk", flat=True)
        for job_id in through_reconnects(lambda: list(asked)):
            if keys[job_id] not in self.canceled:
                self.canceled.add(keys[job_id])
                self.pool.cancel(keys[job_id])

    def finish_held(self, deadline: float) -> None:
        """Report the attempts in the slots as they end, taking no more, until ``deadline``.

        ``deadline`` is a ``time.monotonic()`` reading."""
        while (self.held or self.unreported) and (left := deadline - time.monotonic()) > 0:
            try:
                self.report_ended()
                self.look_for_cancels()
            except Exception:
                logger.exception("Could not report the attempts that ended; trying again")
            if self.held or self.unreported:
                self.waiter.wait(min(left, CANCEL_LOOK))
        try:
            self.report_ended()
        except Exception:
            logger.exception("Stopping: %d ended attempt(s) left unreported", len(self.unreported))

    def hand_back(self) -> None:
        """Hand back the attempts still in the slots as the process stops.

        They are not tries, and another runner may claim them at once (this one's calls
        end with its process)."""
        if not self.held:
            return
        ids = [attempt.pk for attempt in self.held.values()]
        logger.warning("Stopping: handing back %d running attempt(s)", len(ids))

        through_reconnects(lambda: release(self.claimant, ids))
        self.held.clear()

    def drain(self) -> int:
        """Claim and run attempts in this thread, one at a time; return how many ran.

        It stops when nothing is left to claim. The in-process step of tests: what a runner
        does, without its threads."""
        ran = 0
        while claimed := self.claim(1):
            for attempt in claimed:
                self.report([run_attempt(attempt)])
                ran += 1
        return ran

    def close(self) -> None:
        self.waiter.close()

    def claim(self, limit: int = 1) -> list[Attempt]:
        """Take up to ``limit`` dispatched attempts of the jobs registered in this process.

        Through :func:`.protocol.claim_local`: what its heartbeat says it knows (none
        registered: nothing to claim)."""
        functions = known_paths()
        return claim_local(self.claimant, limit, functions) if functions else []

    def report(self, ended: list[Ended]) -> None:
        """Report the outcomes of attempts that ran (:func:`.protocol.report`)."""
        report(self.claimant, ended)

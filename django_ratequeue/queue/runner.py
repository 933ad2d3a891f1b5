"""Running attempts on a django-q2 worker.

``run_batch`` receives attempt ids only (never client data). Each attempt is claimed with a
conditional UPDATE (not started, not ended), so an attempt that already ran or was recovered
never runs again, even when django-q2 delivers the same task twice. When its own batch is
done, the runner runs the resting loop's next pass itself, and else takes over attempts
that were dispatched but not started yet (other batches still queued), so one slow job does
not hold up the jobs dealt to its batch.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import traceback as tb
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from ..conf import ratequeue_settings
from ..exceptions import NonRetryableError, RecursiveWaitDeadlock
from .bulk import update_rows
from .enqueue import import_function
from .loop import take_resting_pass, wake_loop
from .models import Attempt, Job, Outcome
from .subtasks import current_attempt
from .watchdog import beat

logger = logging.getLogger(__name__)
T = TypeVar("T")


class AttemptTimedOut(Exception):
    """Raised inside a job that ran past its ``timeout``."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the job with :class:`AttemptTimedOut` after ``seconds`` (SIGALRM, main
    thread only; the loop's recovery covers the rest). django-q2's own alarm is restored."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise AttemptTimedOut(f"The attempt ran past its timeout of {seconds:g} seconds.")

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, interrupt)
    previous_delay, _interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:
            remaining = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 0.001))


def run_batch(attempt_ids: list[int], until: float | None = None) -> None:
    """The django-q2 task: run the given attempts, then help with undelivered ones.

    When its attempts freed slots and the loop rests, this worker, about to go idle, runs
    the loop's next pass itself before it helps others (the pass deals new work to every
    worker, so they keep busy meanwhile), then that pass's own batch, and so on while the
    task is younger than half a lease (or than ``until``, a ``time.monotonic()``): each
    turn saves two broker round trips, the kick's and the batch's."""
    global _chunk
    if until is None:
        until = time.monotonic() + ratequeue_settings()["LOOP_LEASE"] / 2
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

    A chunk is claimed with one conditional UPDATE and reported with one statement. It
    doubles (up to ``MAX_CHUNK``) while jobs finish quickly and falls back to one attempt
    after a slow chunk, so no-op jobs cost a fraction of a query each while a slow job
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
        """Run a batch."""
        through_reconnects(
            lambda: Attempt.objects.filter(
                pk__in=attempt_ids, worker="", started_at=None, ended_at=None
            ).update(worker=self.worker)
        )
        todo = list(attempt_ids)
        while todo:
            todo = self.run_chunk(todo)

    def help(self) -> None:
        """Run attempts dealt to batches that are still queued, or whose worker is busy."""
        for _ in range(ratequeue_settings()["DISPATCH_BATCH_SIZE"]):
            spare = list(
                Attempt.objects.filter(active=True, started_at=None, ended_at=None)
                .order_by("pk")
                .values_list("pk", flat=True)[: self.chunk]
            )
            if not spare:
                break
            self.run_chunk(spare)

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

    def run_chunk(self, todo: list[int]) -> list[int]:
        """Run the first ``chunk`` attempts of ``todo``; return the rest."""
        taken, rest = todo[: self.chunk], todo[self.chunk :]
        claimed = self.claim(taken)
        began = time.monotonic()
        for attempt in claimed:
            run_attempt(attempt)
        quick = time.monotonic() - began < self.QUICK * max(len(claimed), 1)
        self.chunk = min(self.chunk * 2, self.MAX_CHUNK) if quick else 1
        self.report(claimed)
        self.unreported = self.unreported or bool(claimed)
        # After a slow job at once; after quick ones at most every SEGMENT seconds.
        if time.monotonic() - self.last_wake >= ratequeue_settings()["SEGMENT"]:
            self.wake()
        return rest

    def report(self, attempts: list[Attempt]) -> None:
        """Write the outcomes of attempts that ran (through lost connections, see
        :func:`through_reconnects`)."""
        through_reconnects(
            lambda: update_rows(
                Attempt,
                attempts,
                ["ended_at", "outcome", "result", "error", "traceback"],
                # A recovered (superseded) attempt already ended: its late report is ignored.
                condition="t.ended_at IS NULL",
            )
        )

    def claim(self, attempt_ids: list[int]) -> list[Attempt]:
        """Take the attempts nobody started yet; an attempt that already ran, or was
        recovered, is skipped, so a task django-q2 delivers twice runs nothing twice.
        Claimed attempts are marked with this worker and one timestamp, so that claiming
        again after a lost connection finds what the first try may have taken."""
        if not attempt_ids:
            return []
        stamp = timezone.now()

        def take() -> list[Attempt]:
            Attempt.objects.filter(pk__in=attempt_ids, started_at=None, ended_at=None).update(
                worker=self.worker, started_at=stamp
            )
            return list(
                Attempt.objects.filter(pk__in=attempt_ids, worker=self.worker, started_at=stamp)
                .select_related("job")
                .only("timeout", "started_at", "queue", "job__func", "job__args", "job__kwargs")
                .order_by("pk")
            )

        return through_reconnects(take)

    def wake(self) -> None:
        """Tell the loop that slots came free."""
        if self.unreported:
            wake_loop()
            self.unreported = False
        self.last_wake = time.monotonic()


def through_reconnects(action: Callable[[], T]) -> T:
    """Run ``action``, which may be repeated, until it gets through: after a lost database
    connection (a restart) on a new one. A claim or a report must not be dropped while
    this worker lives, since nobody else would end those attempts (recovery waits for dead
    workers and timeouts). Should the database stay away, django-q2's timeout ends this
    worker, and recovery then takes its attempts as lost."""
    pause = 0.05
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


def run_attempt(attempt: Attempt) -> None:
    """Run one claimed attempt and record its outcome on it (written by the caller)."""
    job: Job = attempt.job
    attempt.result, attempt.error, attempt.traceback = None, "", ""
    attempt.outcome = Outcome.SUCCEEDED
    token = current_attempt.set(attempt)
    try:
        func = import_function(job.func)
        with time_limit(attempt.timeout):
            result = func(*job.args, **job.kwargs)
        json.dumps(result, allow_nan=False)
        attempt.result = result
    except AttemptTimedOut as exc:
        attempt.outcome, attempt.error = Outcome.TIMED_OUT, str(exc)
        attempt.traceback = tb.format_exc()
    except (NonRetryableError, RecursiveWaitDeadlock) as exc:
        attempt.outcome, attempt.error = Outcome.NON_RETRYABLE, _describe(exc)
        attempt.traceback = tb.format_exc()
    except Exception as exc:
        attempt.outcome, attempt.error = Outcome.FAILED, _describe(exc)
        attempt.traceback = tb.format_exc()
    finally:
        current_attempt.reset(token)
    attempt.ended_at = timezone.now()


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__

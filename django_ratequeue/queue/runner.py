"""Running attempts on a django-q2 worker.

``run_batch`` receives attempt ids only (never client data). Each attempt is claimed with a
conditional UPDATE (not started, not ended), so an attempt that already ran or was recovered
never runs again, even when django-q2 delivers the same task twice. When its own batch is
done, the runner takes over attempts that were dispatched but not started yet (other
batches still queued), so one slow job does not hold up the jobs dealt to its batch.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import traceback as tb
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.utils import timezone

from ..conf import ratequeue_settings
from ..exceptions import NonRetryableError
from .enqueue import import_function
from .loop import wake_loop
from .models import Attempt, Job, Outcome
from .watchdog import beat


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


def run_batch(attempt_ids: list[int]) -> None:
    """The django-q2 task: run the given attempts, then help with undelivered ones."""
    me = beat()
    Attempt.objects.filter(pk__in=attempt_ids, worker="", started_at=None, ended_at=None).update(
        worker=me
    )
    reporter = Reporter()
    for attempt_id in attempt_ids:
        run_attempt(attempt_id, me, reporter)
    for _ in range(ratequeue_settings()["DISPATCH_BATCH_SIZE"]):
        spare = (
            Attempt.objects.filter(active=True, started_at=None, ended_at=None)
            .order_by("pk")
            .values_list("pk", flat=True)
            .first()
        )
        if spare is None:
            break
        run_attempt(spare, beat(), reporter)
    reporter.flush()


class Reporter:
    """Wakes the loop about completions: after a slow job at once, after quick ones at most
    every SEGMENT seconds, and at the end of the batch."""

    def __init__(self) -> None:
        self.pending = False
        self.last = time.monotonic()

    def ended(self) -> None:
        self.pending = True
        if time.monotonic() - self.last >= ratequeue_settings()["SEGMENT"]:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            wake_loop()
            self.pending = False
        self.last = time.monotonic()


def run_attempt(attempt_id: int, me: str, reporter: Reporter) -> None:
    claimed = Attempt.objects.filter(pk=attempt_id, started_at=None, ended_at=None).update(
        worker=me, started_at=timezone.now()
    )
    if not claimed:
        return
    attempt = (
        Attempt.objects.select_related("job")
        .only("timeout", "job__func", "job__args", "job__kwargs")
        .get(pk=attempt_id)
    )
    job: Job = attempt.job
    result: Any = None
    error = trace = ""
    outcome = Outcome.SUCCEEDED
    try:
        func = import_function(job.func)
        with time_limit(attempt.timeout):
            result = func(*job.args, **job.kwargs)
        json.dumps(result, allow_nan=False)
    except AttemptTimedOut as exc:
        outcome, error, trace = Outcome.TIMED_OUT, str(exc), tb.format_exc()
    except NonRetryableError as exc:
        outcome, error, trace = Outcome.NON_RETRYABLE, _describe(exc), tb.format_exc()
    except Exception as exc:
        outcome, error, trace = Outcome.FAILED, _describe(exc), tb.format_exc()
    if outcome != Outcome.SUCCEEDED:
        result = None
    # A recovered (superseded) attempt already has ended_at: this late report is ignored.
    Attempt.objects.filter(pk=attempt_id, ended_at=None).update(
        ended_at=timezone.now(), outcome=outcome, result=result, error=error, traceback=trace
    )
    reporter.ended()


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__

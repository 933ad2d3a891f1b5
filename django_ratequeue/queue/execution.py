"""Running one claimed attempt: its job's function under its time limit, and what came
of it (outcome, result, error, the class of what it raised) recorded on the attempt for
the runner to report. The only rows written here are the job's progress and output that
are still pending as the attempt ends (:mod:`.progress`).

A job that raises ``SystemExit`` or ``KeyboardInterrupt`` fails like any other; anything
else that stops the process is recorded, then re-raised for the runner to report what ran.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import signal
import threading
import time
import traceback as tb
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError

from .. import clock
from ..conf import ratequeue_settings
from ..exceptions import (
    AttemptTimedOut,
    NonRetryableError,
    RecursiveWaitDeadlock,
    UnknownJob,
    class_path,
    describe,
)
from .bounds import MAX_TIMEOUT, check_json, clip
from .models import Attempt, Job, Outcome
from .progress import write_rest
from .registry import registered_job
from .subtasks import current_attempt

# What the database answers to a value it cannot store.
REFUSED = (DataError, IntegrityError)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the job with :class:`AttemptTimedOut` after ``seconds`` (SIGALRM, main
    thread only; the loop's recovery covers the rest). django-q2's own alarm is restored.
    A timeout beyond MAX_TIMEOUT (a row changed behind the app's back) counts as that."""
    if not seconds or not seconds > 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    seconds = min(seconds, MAX_TIMEOUT.total_seconds())

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


def run_attempt(attempt: Attempt) -> None:
    """Run one claimed attempt and record its outcome on it (written by the caller).

    The job's function is looked up among the registered jobs, never imported: a row whose
    function is not one (changed in the database, or from a deploy that registers other
    jobs) fails at once, without retries, with an error that says how to register it."""
    job: Job = attempt.job
    attempt.result, attempt.error, attempt.traceback = None, "", ""
    attempt.outcome, attempt.exception_class_path = Outcome.SUCCEEDED, ""
    token = current_attempt.set(attempt)
    try:
        func = registered_job(job.func).func
        if not isinstance(job.args, list) or not isinstance(job.kwargs, dict):
            raise NonRetryableError(
                "The job's row holds malformed arguments: args must be a JSON list and "
                "kwargs a JSON object."
            )
        with time_limit(attempt.timeout):
            result = call_job(func, job.args, job.kwargs)
        check_result_size(result)
        attempt.result = result
    except AttemptTimedOut as exc:
        failed(attempt, exc, Outcome.TIMED_OUT, str(exc))
    except (NonRetryableError, RecursiveWaitDeadlock, UnknownJob) as exc:
        failed(attempt, exc, Outcome.NON_RETRYABLE, describe(exc))
    except Exception as exc:
        failed(attempt, exc, Outcome.FAILED, describe(exc))
    except (SystemExit, KeyboardInterrupt) as exc:
        # The job's own (django-q2's workers ignore SIGINT): it fails, the worker goes on.
        error = f"{describe(exc)} (a job cannot stop its worker: this attempt failed)"
        failed(attempt, exc, Outcome.FAILED, error)
    except BaseException as exc:
        # Anything else stops the process: record the attempt for the caller to report.
        failed(attempt, exc, Outcome.FAILED, f"{describe(exc)} (its worker stopped)")
        raise
    finally:
        current_attempt.reset(token)
        # Its progress and output are complete before its outcome can be seen.
        write_rest(attempt)
        # Stored as a database can: cut to size, a NUL escaped, a lone surrogate replaced.
        limit = ratequeue_settings().MAX_ERROR_BYTES
        for field in ("error", "traceback", "exception_class_path"):
            setattr(attempt, field, clip(getattr(attempt, field), limit))
        attempt.ended_at = clock.now()


def call_job(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call a job's function; run an ``async def`` one (also behind ``functools.partial``
    or ``functools.wraps``) to its end on an event loop of its own, in a copy of this
    context, which holds :data:`.subtasks.current_attempt`."""
    if not (
        inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(inspect.unwrap(func))
    ):
        return func(*args, **kwargs)
    with asyncio.Runner() as runner:
        return runner.run(func(*args, **kwargs), context=contextvars.copy_context())


def failed(attempt: Attempt, exc: BaseException, outcome: str, error: str) -> None:
    """Record how an attempt failed: its outcome, error and traceback, and the class of
    the exception by its path (what ``JobFailed`` and django.tasks' ``TaskError`` give
    back, read from the row rather than from the traceback's text)."""
    attempt.outcome, attempt.error = outcome, error
    attempt.traceback = "".join(tb.format_exception(exc))
    attempt.exception_class_path = class_path(type(exc))


def refusal(error: DatabaseError) -> str:
    """Return the error of an attempt whose outcome the database refused to store (a value
    that slipped past :mod:`.bounds`): the attempt fails with it instead."""
    lines = str(error).splitlines() or [type(error).__name__]
    # PostgreSQL's LINE and CONTEXT quote the statement, values and all: its DETAIL does not.
    reason = "; ".join([lines[0], *(line for line in lines[1:] if line.startswith("DETAIL:"))])
    return clip(
        f"The database refused this attempt's outcome, so it failed: {reason}",
        ratequeue_settings().MAX_ERROR_BYTES,
    )


def check_result_size(result: Any) -> None:
    """Refuse a result a database cannot store (:func:`.bounds.check_json`) or bigger than
    MAX_RESULT_BYTES: the attempt fails rather than store it (and hand it to every reader
    and callback)."""
    size = len(check_json("return value", result))
    limit = ratequeue_settings().MAX_RESULT_BYTES
    if size > limit:
        raise ValueError(
            f"The job's result is {size} bytes of JSON; the most is "
            f'RATEQUEUE["MAX_RESULT_BYTES"] ({limit}). Store big output elsewhere (a file, '
            "a row) and return a reference to it."
        )

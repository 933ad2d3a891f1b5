"""Running claimed attempts: the call that runs an attempt's job (:func:`prepare`), for
a slot (:mod:`django_ratequeue.slots`) to run, and what came of it (outcome, result,
error, the class of what it raised) recorded on the attempt for the runner to report
(:func:`finish`). The only rows written here are the job's progress and output that are
still pending as the attempt ends (:mod:`.progress`).

Whatever a job raises is its outcome, ``SystemExit`` and ``KeyboardInterrupt`` included:
the attempt fails, the worker goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import traceback as tb
from datetime import datetime
from functools import partial
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
from ..slots import Call, Finished, Slots
from .bounds import MAX_TIMEOUT, check_json, clip
from .models import Attempt, Job, Outcome
from .progress import write_rest
from .registry import is_async, registered_job
from .subtasks import current_attempt

# What the database answers to a value it cannot store.
REFUSED = (DataError, IntegrityError)


def prepare(attempt: Attempt) -> Call:
    """Return the call that runs a claimed attempt: its job's registered function with the
    job's arguments, under the attempt's time limit, with the attempt as the current one.

    The function is looked up among the registered jobs, never imported: a row whose
    function is not one (changed in the database, or from a deploy that registers other
    jobs) raises :class:`UnknownJob`, which fails the attempt without retries."""
    job: Job = attempt.job
    func = registered_job(job.func).func
    if not isinstance(job.args, list) or not isinstance(job.kwargs, dict):
        raise NonRetryableError(
            "The job's row holds malformed arguments: args must be a JSON list and "
            "kwargs a JSON object."
        )
    context = contextvars.copy_context()
    context.run(current_attempt.set, attempt)
    timeout = attempt.timeout
    # A timeout beyond MAX_TIMEOUT (a row changed behind the app's back) counts as that.
    if timeout is not None and timeout > 0:
        timeout = min(timeout, MAX_TIMEOUT.total_seconds())
    else:
        timeout = None
    return Call(
        key=attempt.pk,
        function=partial(func, *job.args, **job.kwargs),
        is_async=is_async(func),
        timeout=timeout,
        context=context,
    )


def finish(attempt: Attempt, finished: Finished, ended_at: datetime | None = None) -> Attempt:
    """Record on ``attempt`` how its call ended, for the runner to report: its outcome and
    result, or how it failed; with its progress and output written first."""
    attempt.result, attempt.error, attempt.traceback = None, "", ""
    attempt.outcome, attempt.exception_class_path = Outcome.SUCCEEDED, ""
    error = finished.error
    if error is None:
        try:
            check_result_size(finished.value)
            attempt.result = finished.value
        except Exception as exc:
            error = exc
    if error is not None:
        failed(attempt, error, *_outcome_of(error, finished.timed_out))
    # Its progress and output are complete before its outcome can be seen.
    write_rest(attempt)
    # Stored as a database can: cut to size, a NUL escaped, a lone surrogate replaced.
    limit = ratequeue_settings().MAX_ERROR_BYTES
    for field in ("error", "traceback", "exception_class_path"):
        setattr(attempt, field, clip(getattr(attempt, field), limit))
    attempt.ended_at = ended_at or clock.now()
    return attempt


def _outcome_of(error: BaseException, timed_out: bool) -> tuple[str, str]:
    """The outcome of an attempt whose call raised ``error``, and its error text."""
    if timed_out or isinstance(error, AttemptTimedOut):
        return Outcome.TIMED_OUT, str(error)
    if isinstance(error, NonRetryableError | RecursiveWaitDeadlock | UnknownJob):
        return Outcome.NON_RETRYABLE, describe(error)
    if isinstance(error, Exception):
        return Outcome.FAILED, describe(error)
    if isinstance(error, asyncio.CancelledError):
        return Outcome.FAILED, f"{describe(error)} (the job's task was cancelled)"
    # SystemExit, KeyboardInterrupt: the job's own; it fails, the worker goes on.
    return Outcome.FAILED, f"{describe(error)} (a job cannot stop its worker: this attempt failed)"


# Runs an attempt in the calling thread (run_attempt): tests, and nothing else.
_here = Slots(0, lambda finished: None, name="ratequeue-here", interrupt_with=AttemptTimedOut)


def run_attempt(attempt: Attempt) -> Attempt:
    """Run one claimed attempt in this thread and record its outcome on it (written by the
    caller): a step of a test, as a runner's slot would run it."""
    try:
        call = prepare(attempt)
    except Exception as exc:
        return finish(attempt, Finished(attempt.pk, error=exc))
    return finish(attempt, _here.run_here(call))


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

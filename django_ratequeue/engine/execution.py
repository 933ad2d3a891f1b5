"""Running claimed attempts, and recording what came of them.

:func:`prepare` gives the call that runs an attempt's job, for a slot
(:mod:`.pool`); :func:`settle` makes how it ended a plain report, in that
slot; :func:`finish` records the report on the attempt for the runner to report, with the
job's pending progress and output written first (:mod:`.progress`). Whatever a job raises is its
outcome, ``SystemExit`` included (docs/concepts.md, "Recovery").
"""

from __future__ import annotations

import contextvars
import logging
from datetime import datetime
from functools import partial
from typing import Any

from django_ratequeue import clock, plain
from django_ratequeue.engine.bounds import MAX_TIMEOUT
from django_ratequeue.engine.models import Attempt, Job
from django_ratequeue.engine.pool import Call, Finished, Pool
from django_ratequeue.engine.progress import write_rest
from django_ratequeue.engine.protocol import Ended, Report
from django_ratequeue.engine.registry import is_async, registered_job
from django_ratequeue.engine.subtasks import current_attempt
from django_ratequeue.exceptions import AttemptTimedOut, NonRetryableError
from django_ratequeue.tracing import end_attempt, start_attempt

logger = logging.getLogger(__name__)

# The span of each attempt prepared in this process and not finished yet (OpenTelemetry).
_spans: dict[int, Any] = {}


def prepare(attempt: Attempt) -> Call:
    """Return the call that runs a claimed attempt.

    The call runs its job's registered function with the job's arguments, under the
    attempt's time limit, with the attempt as the current one.

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
    span = start_attempt(job.traceparent, span_attributes(attempt), context)
    if span is not None:
        _spans[attempt.pk] = span
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


def span_attributes(attempt: Attempt) -> dict[str, Any]:
    """Return the attributes of an attempt's span (docs/tracing.md)."""
    job: Job = attempt.job
    attributes: dict[str, Any] = {
        "ratequeue.function": job.func,
        "ratequeue.queue": attempt.queue,
        "ratequeue.job_id": job.pk,
        "ratequeue.attempt_id": attempt.pk,
    }
    if attempt.started_at is not None and job.start_at is not None:
        waited = (attempt.started_at - job.start_at).total_seconds()
        attributes["ratequeue.wait_seconds"] = max(waited, 0.0)
    return attributes


def settle(finished: Finished) -> Report:
    """Return how a call ended as a plain report; never raise.

    Called in the slot that ran the call, so that nothing the job made reaches the runner:
    a value that cannot be made plain fails its own attempt (:mod:`django_ratequeue.plain`)."""
    if finished.error is None:
        make = partial(Report.returned, finished.value)
    else:
        make = partial(Report.raised, finished.error, finished.timed_out)
    return plain.guarded(make, _unsettled)


def _unsettled(raised: BaseException) -> Report:
    return Report.failed(f"The attempt's end could not be recorded: {plain.describe(raised)}")


def finish(attempt: Attempt, report: Report, ended_at: datetime | None = None) -> Ended:
    """Return how ``attempt`` ended, as ``report`` says, for the runner to report.

    It is recorded on ``attempt`` too, for a test to read; the job's progress and output
    are written first. Neither that write nor the attempt's span can keep the outcome
    from being reported."""
    # Its progress and output are complete before its outcome can be seen.
    try:
        write_rest(attempt)
    except Exception:
        logger.exception("Could not write the last progress or output of attempt %s", attempt.pk)
    try:
        end_attempt(_spans.pop(attempt.pk, None), report.outcome, report.error)
    except Exception:
        logger.exception("Could not end the span of attempt %s", attempt.pk)
    for name, value in report.fields().items():
        setattr(attempt, name, value)
    attempt.ended_at = ended_at or clock.now()
    return Ended(attempt.pk, report, attempt.ended_at, attempt.started_at)


# Runs an attempt in the calling thread (run_attempt): tests, and nothing else.
_here = Pool(0, lambda finished: None, name="ratequeue-here", interrupt_with=AttemptTimedOut)


def run_attempt(attempt: Attempt) -> Ended:
    """Run one claimed attempt in this thread and return its outcome.

    The caller reports it (it is recorded on the attempt too): a step of a test, as a
    runner's slot would run it."""
    try:
        call = prepare(attempt)
    except Exception as exc:
        return finish(attempt, settle(Finished(attempt.pk, error=exc)))
    return finish(attempt, settle(_here.run_here(call)))

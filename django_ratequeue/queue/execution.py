"""Running claimed attempts, and recording what came of them.

:func:`prepare` gives the call that runs an attempt's job, for a slot
(:mod:`django_ratequeue.slots`); :func:`finish` records its outcome, result, error and the
class of what it raised on the attempt for the runner to report, with the job's pending
progress and output written first (:mod:`.progress`). Whatever a job raises is its
outcome, ``SystemExit`` included (docs/concepts.md, "Recovery").
"""

from __future__ import annotations

import contextvars
from datetime import datetime
from functools import partial
from typing import Any

from .. import clock
from ..exceptions import AttemptTimedOut, NonRetryableError
from ..slots import Call, Finished, Slots
from ..tracing import end_attempt, start_attempt
from .bounds import MAX_TIMEOUT
from .models import Attempt, Job
from .progress import write_rest
from .protocol import Ended, Report
from .registry import is_async, registered_job
from .subtasks import current_attempt

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


def finish(attempt: Attempt, finished: Finished, ended_at: datetime | None = None) -> Ended:
    """Return how ``attempt``'s call ended, for the runner to report.

    It is recorded on ``attempt`` too, for a test to read; the job's progress and output
    are written first."""
    if finished.error is None:
        report = Report.returned(finished.value)
    else:
        report = Report.raised(finished.error, finished.timed_out)
    # Its progress and output are complete before its outcome can be seen.
    write_rest(attempt)
    end_attempt(_spans.pop(attempt.pk, None), report.outcome, report.error)
    for name, value in report.fields().items():
        setattr(attempt, name, value)
    attempt.ended_at = ended_at or clock.now()
    return Ended(attempt.pk, report, attempt.ended_at, attempt.started_at)


# Runs an attempt in the calling thread (run_attempt): tests, and nothing else.
_here = Slots(0, lambda finished: None, name="ratequeue-here", interrupt_with=AttemptTimedOut)


def run_attempt(attempt: Attempt) -> Ended:
    """Run one claimed attempt in this thread and return its outcome.

    The caller reports it (it is recorded on the attempt too): a step of a test, as a
    runner's slot would run it."""
    try:
        call = prepare(attempt)
    except Exception as exc:
        return finish(attempt, Finished(attempt.pk, error=exc))
    return finish(attempt, _here.run_here(call))

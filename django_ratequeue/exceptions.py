"""Define every exception django-ratequeue raises on purpose, all from :class:`RateQueueError`.

The public ones (importable from ``django_ratequeue``) come first, the internal ones
last: the dotted paths of ``AttemptTimedOut`` and ``WorkerLost`` are stored on attempts
and documented (docs/api.md#exceptions).
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ObjectDoesNotExist
from django.db import DatabaseError

from django_ratequeue import plain


class RateQueueError(Exception):
    """The base class of every django-ratequeue exception."""


class RateLimited(RateQueueError):
    """A rate limit refused a consume (``throws=True``), or a reservation cap was reached."""

    def __init__(self, name: str, key: str | None, retry_at: datetime | None) -> None:
        self.name = name
        self.key = key
        self.retry_at = retry_at
        target = f"{name!r}" if key is None else f"{name!r} for key {key!r}"
        when = f"; retry at {retry_at.isoformat()}" if retry_at else ""
        super().__init__(f"Rate limit {target} exceeded{when}")


class EnqueueRateLimited(RateLimited):
    """``ENQUEUE_RATE_LIMIT`` refused an enqueue; nothing was written."""


class JobError(RateQueueError):
    """Base class of the errors a :class:`~django_ratequeue.Handle` reports."""


class JobDoesNotExist(JobError, ObjectDoesNotExist):
    """There is no such job, or none the handle's owner may see (the two look the same).

    It is also the job model's own ``Job.DoesNotExist`` (see
    :mod:`django_ratequeue.engine.models`), so ``except Job.DoesNotExist`` catches it, and a
    failed ``Job.objects.get()`` raises it."""


class BatchDoesNotExist(RateQueueError, ObjectDoesNotExist):
    """There is no such batch, or none the handle's owner may see (the two look the same)."""


class JobFailed(JobError):
    """The job ended in failure.

    ``error``, ``traceback`` and ``exception_class_path`` (``builtins.ValueError``,
    ``myapp.errors.Refused``...; empty when the job raised nothing itself) describe its
    last attempt."""

    def __init__(
        self, job_id: str, error: str, traceback: str = "", exception_class_path: str = ""
    ) -> None:
        self.job_id = job_id
        self.error = error
        self.traceback = traceback
        self.exception_class_path = exception_class_path
        super().__init__(f"Job {job_id} failed: {error}")


class JobCanceled(JobError):
    """The job was canceled before it completed."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"Job {job_id} was canceled")


class DuplicateJobId(JobError, ValueError):
    """A job with this id exists and ``on_duplicate_id="error"``."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"A job with id {job_id!r} already exists; pass on_duplicate_id='ignore' "
            "to get its handle instead"
        )


class NonRetryableError(RateQueueError):
    """Raise inside a job to fail it at once, with no further attempts."""


class RecursiveWaitDeadlock(JobError):
    """A job waited on a subtask that could never start: its queue has no slot left."""

    def __init__(self, message: str, *, queue: str, chain: list[str] | None = None) -> None:
        self.queue = queue
        self.chain = chain or []
        super().__init__(message)


class UnknownJob(RateQueueError, ValueError):
    """A function or dotted path that is not registered as a job (or a task) was named.

    Only functions decorated with ``@job`` whose module is imported at start-up run."""


class NotInJob(RateQueueError, RuntimeError):
    """``report_progress()`` or ``stream_output()`` was called outside a running job.

    Or in a thread the job started without copying its context."""


# Internal: not exported from ``django_ratequeue``.


class AttemptTimedOut(RateQueueError):
    """Raised inside a job that ran past its ``timeout``.

    Also the error class of an attempt the main loop found overrunning it."""


class WorkerLost(RateQueueError):
    """The error class recorded for an attempt whose worker process died."""


class StepConflict(RateQueueError, DatabaseError):
    """A job moved between a loop step's read of it and the step's write.

    Only the loop moves a job, one step at a time, so this should never be raised: it
    means another writer moved it, and what the step decided from its read is void. A
    database error, so that the step's transaction rolls back (no job is failed for it)
    and the next step reads afresh."""


class LeaseLost(RateQueueError):
    """A remote worker reported on an attempt its key's workers do not hold (any more).

    Its lease lapsed, it was ended or released, or it was never theirs. Nothing
    changed."""


def class_path(cls: type[BaseException]) -> str:
    """Return the dotted path of an exception class, as stored on attempts.

    Also as in ``TaskError.exception_class_path`` (``builtins.ValueError`` for a
    built-in)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(error: BaseException) -> str:
    """Return ``Type: message`` of an exception, as errors are shown on jobs.

    Its message is left out when ``str()`` of it raises (:func:`.plain.describe`)."""
    return plain.describe(error)

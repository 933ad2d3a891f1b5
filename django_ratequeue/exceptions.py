"""Every exception django-ratequeue raises on purpose, importable from ``django_ratequeue``."""

from __future__ import annotations

from datetime import datetime


class RateLimited(Exception):
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


class JobError(Exception):
    """Base class of the errors a :class:`~django_ratequeue.Handle` reports."""


class JobFailed(JobError):
    """The job ended in failure; ``error`` and ``traceback`` describe its last attempt."""

    def __init__(self, job_id: str, error: str, traceback: str = "") -> None:
        self.job_id = job_id
        self.error = error
        self.traceback = traceback
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


class NonRetryableError(Exception):
    """Raise inside a job to fail it at once, with no further attempts."""


class RecursiveWaitDeadlock(JobError):
    """A job waited on a subtask that could never start: its queue has no slot left."""

    def __init__(self, message: str, *, queue: str, chain: list[str] | None = None) -> None:
        self.queue = queue
        self.chain = chain or []
        super().__init__(message)


class UnknownJob(ValueError):
    """A function or dotted path that is not registered as a job (or a task) was named:
    only functions decorated with ``@job`` whose module is imported at start-up run."""

"""Rate limits and job queues kept in your Django database.

The public names are imported lazily so that listing ``django_ratequeue`` in
``INSTALLED_APPS`` does not import models before the app registry is ready. A type
checker sees them through the ``TYPE_CHECKING`` imports below, with their real types;
tests/test_exports.py keeps those imports, ``_EXPORTS`` and ``__all__`` the same.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .exceptions import (
        DuplicateJobId,
        EnqueueRateLimited,
        JobCanceled,
        JobDoesNotExist,
        JobFailed,
        NonRetryableError,
        NotInJob,
        RateLimited,
        RateQueueError,
        RecursiveWaitDeadlock,
        UnknownJob,
    )
    from .queue.control import (
        pause_queue,
        resume_queue,
        set_max_concurrency,
        set_queue_concurrency,
    )
    from .queue.enqueue import AsyncJobFunction, JobFunction, enqueue, enqueue_many, job
    from .queue.handles import Handle, cancel_all, get_handle
    from .queue.models import Status
    from .queue.options import EnqueueOptions
    from .queue.progress import report_progress, stream_output
    from .queue.retry import Retry
    from .ratelimit.api import (
        RateLimitResult,
        check_rate_limit,
        define_rate_limits,
        get_rate_limit_value,
        rate_limit,
        reset_rate_limit,
    )
    from .ratelimit.config import FixedWindow, TokenBucket
    from .slots import cancel_requested

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # errors
    "RateQueueError": ".exceptions",
    "JobDoesNotExist": ".exceptions",
    "RateLimited": ".exceptions",
    "EnqueueRateLimited": ".exceptions",
    "JobFailed": ".exceptions",
    "JobCanceled": ".exceptions",
    "DuplicateJobId": ".exceptions",
    "NonRetryableError": ".exceptions",
    "NotInJob": ".exceptions",
    "RecursiveWaitDeadlock": ".exceptions",
    "UnknownJob": ".exceptions",
    # rate limits
    "TokenBucket": ".ratelimit.config",
    "FixedWindow": ".ratelimit.config",
    "RateLimitResult": ".ratelimit.api",
    "rate_limit": ".ratelimit.api",
    "check_rate_limit": ".ratelimit.api",
    "reset_rate_limit": ".ratelimit.api",
    "get_rate_limit_value": ".ratelimit.api",
    "define_rate_limits": ".ratelimit.api",
    # jobs and queues
    "job": ".queue.enqueue",
    "JobFunction": ".queue.enqueue",
    "AsyncJobFunction": ".queue.enqueue",
    "EnqueueOptions": ".queue.options",
    "enqueue": ".queue.enqueue",
    "enqueue_many": ".queue.enqueue",
    "Retry": ".queue.retry",
    "Status": ".queue.models",
    "report_progress": ".queue.progress",
    "stream_output": ".queue.progress",
    "cancel_requested": ".slots",
    "Handle": ".queue.handles",
    "get_handle": ".queue.handles",
    "cancel_all": ".queue.handles",
    "pause_queue": ".queue.control",
    "resume_queue": ".queue.control",
    "set_max_concurrency": ".queue.control",
    "set_queue_concurrency": ".queue.control",
}

# A literal list, which type checkers read as the names the package re-exports.
__all__ = [
    "AsyncJobFunction",
    "DuplicateJobId",
    "EnqueueOptions",
    "EnqueueRateLimited",
    "FixedWindow",
    "Handle",
    "JobCanceled",
    "JobDoesNotExist",
    "JobFailed",
    "JobFunction",
    "NonRetryableError",
    "NotInJob",
    "RateLimitResult",
    "RateLimited",
    "RateQueueError",
    "RecursiveWaitDeadlock",
    "Retry",
    "Status",
    "TokenBucket",
    "UnknownJob",
    "cancel_all",
    "cancel_requested",
    "check_rate_limit",
    "define_rate_limits",
    "enqueue",
    "enqueue_many",
    "get_handle",
    "get_rate_limit_value",
    "job",
    "pause_queue",
    "rate_limit",
    "report_progress",
    "reset_rate_limit",
    "resume_queue",
    "set_max_concurrency",
    "set_queue_concurrency",
    "stream_output",
]


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'django_ratequeue' has no attribute {name!r}") from None
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value

"""Rate limits and job queues kept in your Django database.

The public names are imported lazily so that listing ``django_ratequeue`` in
``INSTALLED_APPS`` does not import models before the app registry is ready.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # errors
    "RateLimited": ".exceptions",
    "EnqueueRateLimited": ".exceptions",
    "JobFailed": ".exceptions",
    "JobCanceled": ".exceptions",
    "DuplicateJobId": ".exceptions",
    "NonRetryableError": ".exceptions",
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
    "enqueue": ".queue.enqueue",
    "enqueue_many": ".queue.enqueue",
    "Retry": ".queue.retry",
    "Status": ".queue.models",
    "Handle": ".queue.handles",
    "get_handle": ".queue.handles",
    "cancel_all": ".queue.handles",
    "pause_queue": ".queue.control",
    "resume_queue": ".queue.control",
    "set_queue_concurrency": ".queue.control",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'django_ratequeue' has no attribute {name!r}") from None
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value

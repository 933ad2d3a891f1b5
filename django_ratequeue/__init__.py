"""Rate limits and job queues kept in your Django database.

The public names are the ``TYPE_CHECKING`` imports below: a type checker reads them there,
with their real types, and at run time they are imported lazily from the same lines
(:func:`_exports`), so that listing ``django_ratequeue`` in ``INSTALLED_APPS`` does not
import models before the app registry is ready.
"""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_ratequeue.engine.pool import cancel_requested as cancel_requested
    from django_ratequeue.exceptions import BatchDoesNotExist as BatchDoesNotExist
    from django_ratequeue.exceptions import DuplicateJobId as DuplicateJobId
    from django_ratequeue.exceptions import EnqueueRateLimited as EnqueueRateLimited
    from django_ratequeue.exceptions import JobCanceled as JobCanceled
    from django_ratequeue.exceptions import JobDoesNotExist as JobDoesNotExist
    from django_ratequeue.exceptions import JobFailed as JobFailed
    from django_ratequeue.exceptions import NonRetryableError as NonRetryableError
    from django_ratequeue.exceptions import NotInJob as NotInJob
    from django_ratequeue.exceptions import RateLimited as RateLimited
    from django_ratequeue.exceptions import RateQueueError as RateQueueError
    from django_ratequeue.exceptions import RecursiveWaitDeadlock as RecursiveWaitDeadlock
    from django_ratequeue.exceptions import UnknownJob as UnknownJob
    from django_ratequeue.jobs import AsyncJobFunction as AsyncJobFunction
    from django_ratequeue.jobs import BatchHandle as BatchHandle
    from django_ratequeue.jobs import EnqueueOptions as EnqueueOptions
    from django_ratequeue.jobs import Eta as Eta
    from django_ratequeue.jobs import Handle as Handle
    from django_ratequeue.jobs import HandleList as HandleList
    from django_ratequeue.jobs import JobFunction as JobFunction
    from django_ratequeue.jobs import Retry as Retry
    from django_ratequeue.jobs import Status as Status
    from django_ratequeue.jobs import batch as batch
    from django_ratequeue.jobs import cancel_all as cancel_all
    from django_ratequeue.jobs import current_batch as current_batch
    from django_ratequeue.jobs import enqueue as enqueue
    from django_ratequeue.jobs import enqueue_many as enqueue_many
    from django_ratequeue.jobs import get_batch as get_batch
    from django_ratequeue.jobs import get_handle as get_handle
    from django_ratequeue.jobs import job as job
    from django_ratequeue.jobs import pause_queue as pause_queue
    from django_ratequeue.jobs import refresh_key_limits as refresh_key_limits
    from django_ratequeue.jobs import report_progress as report_progress
    from django_ratequeue.jobs import resume_queue as resume_queue
    from django_ratequeue.jobs import set_key_limit as set_key_limit
    from django_ratequeue.jobs import set_max_concurrency as set_max_concurrency
    from django_ratequeue.jobs import set_queue_concurrency as set_queue_concurrency
    from django_ratequeue.jobs import stream_output as stream_output
    from django_ratequeue.ratelimit.config import FixedWindow as FixedWindow
    from django_ratequeue.ratelimit.config import KeyedConfig as KeyedConfig
    from django_ratequeue.ratelimit.config import TokenBucket as TokenBucket
    from django_ratequeue.ratelimit.decisions import RateLimitResult as RateLimitResult
    from django_ratequeue.ratelimit.decisions import check_rate_limit as check_rate_limit
    from django_ratequeue.ratelimit.decisions import get_rate_limit_value as get_rate_limit_value
    from django_ratequeue.ratelimit.decisions import rate_limit as rate_limit
    from django_ratequeue.ratelimit.decisions import reset_rate_limit as reset_rate_limit
    from django_ratequeue.ratelimit.defined import define_rate_limits as define_rate_limits

__version__ = "0.1.0"


def _exports() -> dict[str, str]:
    """Return the module of each public name, read from the ``TYPE_CHECKING`` imports."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    return {
        alias.name: "." * statement.level + (statement.module or "")
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }


# public name -> module that defines it
_EXPORTS: dict[str, str] = _exports()

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the public name ``name`` from its module on first use."""
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'django_ratequeue' has no attribute {name!r}") from None
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value

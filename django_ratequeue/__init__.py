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
    from .exceptions import BatchDoesNotExist as BatchDoesNotExist
    from .exceptions import DuplicateJobId as DuplicateJobId
    from .exceptions import EnqueueRateLimited as EnqueueRateLimited
    from .exceptions import JobCanceled as JobCanceled
    from .exceptions import JobDoesNotExist as JobDoesNotExist
    from .exceptions import JobFailed as JobFailed
    from .exceptions import NonRetryableError as NonRetryableError
    from .exceptions import NotInJob as NotInJob
    from .exceptions import RateLimited as RateLimited
    from .exceptions import RateQueueError as RateQueueError
    from .exceptions import RecursiveWaitDeadlock as RecursiveWaitDeadlock
    from .exceptions import UnknownJob as UnknownJob
    from .queue.batches import BatchHandle as BatchHandle
    from .queue.batches import HandleList as HandleList
    from .queue.batches import batch as batch
    from .queue.batches import current_batch as current_batch
    from .queue.batches import get_batch as get_batch
    from .queue.control import pause_queue as pause_queue
    from .queue.control import resume_queue as resume_queue
    from .queue.control import set_max_concurrency as set_max_concurrency
    from .queue.control import set_queue_concurrency as set_queue_concurrency
    from .queue.enqueue import enqueue as enqueue
    from .queue.enqueue import enqueue_many as enqueue_many
    from .queue.eta import Eta as Eta
    from .queue.functions import AsyncJobFunction as AsyncJobFunction
    from .queue.functions import JobFunction as JobFunction
    from .queue.functions import job as job
    from .queue.handles import Handle as Handle
    from .queue.handles import cancel_all as cancel_all
    from .queue.handles import get_handle as get_handle
    from .queue.keylimits import refresh_key_limits as refresh_key_limits
    from .queue.keylimits import set_key_limit as set_key_limit
    from .queue.models import Status as Status
    from .queue.options import EnqueueOptions as EnqueueOptions
    from .queue.progress import report_progress as report_progress
    from .queue.progress import stream_output as stream_output
    from .queue.retry import Retry as Retry
    from .ratelimit.config import FixedWindow as FixedWindow
    from .ratelimit.config import KeyedConfig as KeyedConfig
    from .ratelimit.config import TokenBucket as TokenBucket
    from .ratelimit.decisions import RateLimitResult as RateLimitResult
    from .ratelimit.decisions import check_rate_limit as check_rate_limit
    from .ratelimit.decisions import get_rate_limit_value as get_rate_limit_value
    from .ratelimit.decisions import rate_limit as rate_limit
    from .ratelimit.decisions import reset_rate_limit as reset_rate_limit
    from .ratelimit.defined import define_rate_limits as define_rate_limits
    from .slots import cancel_requested as cancel_requested

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

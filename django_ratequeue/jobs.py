"""The job queue's public face: what an app, the admin, the API and the commands call.

``@job`` registers a function; ``enqueue`` and ``submit`` put calls of it on a queue;
a :class:`Handle` follows one job to its result. The names here are the contract
(docs/api.md); where each is defined, in the engine or a plug-in, is not.
"""

from __future__ import annotations

from django_ratequeue.engine.control import (
    pause_queue,
    resume_queue,
    set_max_concurrency,
    set_queue_concurrency,
)
from django_ratequeue.engine.enqueue import enqueue, enqueue_many
from django_ratequeue.engine.fairness.keylimits import refresh_key_limits, set_key_limit
from django_ratequeue.engine.functions import AsyncJobFunction, JobFunction, job
from django_ratequeue.engine.handles import Handle, cancel_all, get_handle
from django_ratequeue.engine.models import Status
from django_ratequeue.engine.options import EnqueueOptions
from django_ratequeue.engine.progress import report_progress, stream_output
from django_ratequeue.engine.retry import Retry
from django_ratequeue.engine.submit import submit, submit_batch, submit_many
from django_ratequeue.plugins.batches.grouping import (
    BatchHandle,
    HandleList,
    batch,
    current_batch,
    get_batch,
)
from django_ratequeue.plugins.eta.estimates import Eta

__all__ = [
    "AsyncJobFunction",
    "BatchHandle",
    "EnqueueOptions",
    "Eta",
    "Handle",
    "HandleList",
    "JobFunction",
    "Retry",
    "Status",
    "batch",
    "cancel_all",
    "current_batch",
    "enqueue",
    "enqueue_many",
    "get_batch",
    "get_handle",
    "job",
    "pause_queue",
    "refresh_key_limits",
    "report_progress",
    "resume_queue",
    "set_key_limit",
    "set_max_concurrency",
    "set_queue_concurrency",
    "stream_output",
    "submit",
    "submit_batch",
    "submit_many",
]

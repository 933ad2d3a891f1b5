"""The job queue's public face: what an app, the admin, the API and the commands call.

``@job`` registers a function; ``enqueue`` and ``submit`` put calls of it on a queue;
a :class:`Handle` follows one job to its result. The names in the first ``__all__`` are
the contract (docs/api.md); where each is defined, in the engine or a plug-in, is not.
The second lists what the admin, the API, the dashboard and the commands read of the
engine besides: they reach it only through this module and ``django_ratequeue.models``.
"""

from __future__ import annotations

from django_ratequeue.control import (
    pause_queue,
    resume_queue,
    set_max_concurrency,
    set_queue_concurrency,
)
from django_ratequeue.engine.bounds import (
    MAX_DELAY,
    MAX_JSON_DEPTH,
    NUL_REFUSED,
    check_json,
    check_text,
    nested_deeper,
    seconds,
    storable,
)
from django_ratequeue.engine.estimate import Basis, Eta
from django_ratequeue.engine.fairness.keylimits import (
    check_key,
    check_key_concurrency,
    check_key_weight,
    refresh_key_limits,
    set_key_limit,
    store_key_limit,
)
from django_ratequeue.engine.fairness.keys import ready_order
from django_ratequeue.engine.fairness.shares import default_weight, key_settings
from django_ratequeue.engine.handles import (
    AttemptInfo,
    Handle,
    cancel_all,
    get_handle,
    owner_label,
)
from django_ratequeue.engine.heartbeat import any_alive, declared, served_queues
from django_ratequeue.engine.knowing import job_note, unknown_functions
from django_ratequeue.engine.limits import QueueLimits, Queues, environment_limit
from django_ratequeue.engine.models import DEFAULT_QUEUE, Status
from django_ratequeue.engine.options import OPTION_NAMES, EnqueueOptions
from django_ratequeue.engine.optionvalues import parse_start_at
from django_ratequeue.engine.progress import report_progress, stream_output
from django_ratequeue.engine.registry import Registered, exposed_job
from django_ratequeue.engine.retry import Retry
from django_ratequeue.engine.skipscan import distinct_values
from django_ratequeue.engine.wakeup import JOBS, LOOP, Waiter, signal
from django_ratequeue.engine.workerkeys import create_key, find_key, revoke, running_per_instance
from django_ratequeue.intake.enqueue import JOB_ID_MAX_LENGTH, enqueue, enqueue_many
from django_ratequeue.intake.functions import AsyncJobFunction, JobFunction, job
from django_ratequeue.intake.submit import (
    CallOptions,
    atomically,
    submit,
    submit_batch,
    submit_many,
)
from django_ratequeue.plugins.batches.grouping import (
    BatchHandle,
    HandleList,
    batch,
    current_batch,
    get_batch,
)

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

# Not for apps: what the admin, the API, the dashboard and the commands read of the engine.
# The checks every entry point applies to what it is given (lengths, depths, NULs).
__all__ += [
    "MAX_DELAY",
    "MAX_JSON_DEPTH",
    "NUL_REFUSED",
    "check_json",
    "check_text",
    "nested_deeper",
    "seconds",
    "storable",
]
# Enqueueing over HTTP: the exposed functions, the options a body may carry.
__all__ += [
    "JOB_ID_MAX_LENGTH",
    "OPTION_NAMES",
    "CallOptions",
    "Registered",
    "atomically",
    "exposed_job",
    "parse_start_at",
]
# A job's attempts, owner and estimate's basis as its pages show them; waiting for its changes.
__all__ += ["JOBS", "AttemptInfo", "Basis", "Waiter", "job_note", "owner_label"]
# The queues' and keys' limits as the loop applies them, and their runtime changes.
__all__ += [
    "DEFAULT_QUEUE",
    "QueueLimits",
    "Queues",
    "check_key",
    "check_key_concurrency",
    "check_key_weight",
    "default_weight",
    "environment_limit",
    "key_settings",
    "ready_order",
    "store_key_limit",
]
# The workers: local ones by their heartbeats, remote ones by their keys.
__all__ += [
    "any_alive",
    "create_key",
    "declared",
    "find_key",
    "revoke",
    "running_per_instance",
    "served_queues",
    "unknown_functions",
]
# Reading the queue's tables; waking the loop.
__all__ += ["LOOP", "distinct_values", "signal"]

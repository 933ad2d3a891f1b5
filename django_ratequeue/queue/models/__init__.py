"""The queue's tables, and the state changes of their rows (on the models and querysets).

Producers insert :class:`Job` and :class:`CancelRequest` rows; workers claim and end the
:class:`Attempt` rows through the attempt protocol (:mod:`.protocol`); only the main loop
moves a job between statuses, creates attempts and finalises them. docs/concepts.md
("Tables and who writes them") tells who writes what.
"""

from __future__ import annotations

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from .attempts import REPORT_FIELDS, Attempt, AttemptQuerySet
from .batches import UNFINISHED_STATUSES, Batch, batch_callback_id, batch_jobs
from .cluster import (
    LoopState,
    LoopStateQuerySet,
    QueueSetting,
    RuntimeLimits,
    WorkerHeartbeat,
    WorkerKey,
)
from .jobs import CancelRequest, Job, JobQuerySet, OutputChunk, QueueDashboard, new_job_id
from .keylimits import KeyLimit, KeyLimitChange, TurnState
from .minutes import (
    BUCKET_FIELDS,
    COUNT_FIELDS,
    HISTOGRAM_BOUNDS,
    HISTOGRAM_BUCKETS,
    HISTOGRAMS,
    SUMMED_FIELDS,
    QueueMinute,
    QueueTotal,
    RollupCursor,
    bucket_field,
)
from .schedules import Schedule, ScheduleQuerySet
from .statuses import (
    DEFERRED_STATUSES,
    FINAL_STATUSES,
    READY_ORDER,
    LoopStatus,
    Outcome,
    Status,
    Wait,
)
from .uniqueclaims import UniqueClaim

__all__ = [
    "BUCKET_FIELDS",
    "COUNT_FIELDS",
    "DEFERRED_STATUSES",
    "FINAL_STATUSES",
    "HISTOGRAMS",
    "HISTOGRAM_BOUNDS",
    "HISTOGRAM_BUCKETS",
    "READY_ORDER",
    "REPORT_FIELDS",
    "SUMMED_FIELDS",
    "UNFINISHED_STATUSES",
    "Attempt",
    "AttemptQuerySet",
    "Batch",
    "CancelRequest",
    "Job",
    "JobQuerySet",
    "KeyLimit",
    "KeyLimitChange",
    "LoopState",
    "LoopStateQuerySet",
    "LoopStatus",
    "Outcome",
    "OutputChunk",
    "QueueDashboard",
    "QueueMinute",
    "QueueSetting",
    "QueueTotal",
    "RollupCursor",
    "RuntimeLimits",
    "Schedule",
    "ScheduleQuerySet",
    "Status",
    "TurnState",
    "UniqueClaim",
    "Wait",
    "WorkerHeartbeat",
    "WorkerKey",
    "batch_callback_id",
    "batch_jobs",
    "bucket_field",
    "new_job_id",
    "queue_connection",
    "queue_db",
]


def queue_db() -> str:
    """Return the database alias the queue's tables live on, as the project's routers say."""
    return router.db_for_write(Job)


def queue_connection() -> BaseDatabaseWrapper:
    """Return the connection to :func:`queue_db`, for the queue's raw SQL."""
    return connections[queue_db()]

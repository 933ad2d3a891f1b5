"""The queue's tables, and the state changes of their rows (on the models and querysets).

Producers insert :class:`Job` and :class:`CancelRequest` rows; workers claim and end the
:class:`Attempt` rows through the attempt protocol (:mod:`.protocol`); only the main loop
moves a job between statuses, creates attempts and finalises them. docs/concepts.md
("Tables and who writes them") tells who writes what.
"""

from __future__ import annotations

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.engine.models.attempts import REPORT_FIELDS, Attempt, AttemptQuerySet
from django_ratequeue.engine.models.cluster import (
    LoopState,
    LoopStateQuerySet,
    QueueSetting,
    RuntimeLimits,
    WorkerHeartbeat,
    WorkerKey,
)
from django_ratequeue.engine.models.jobs import (
    DEFAULT_QUEUE,
    CancelRequest,
    Job,
    JobQuerySet,
    OutputChunk,
    QueueDashboard,
    new_job_id,
)
from django_ratequeue.engine.models.statuses import (
    DEFERRED_STATUSES,
    FINAL_STATUSES,
    READY_ORDER,
    LoopStatus,
    Outcome,
    Status,
    Wait,
)

__all__ = [
    "DEFAULT_QUEUE",
    "DEFERRED_STATUSES",
    "FINAL_STATUSES",
    "READY_ORDER",
    "REPORT_FIELDS",
    "Attempt",
    "AttemptQuerySet",
    "CancelRequest",
    "Job",
    "JobQuerySet",
    "LoopState",
    "LoopStateQuerySet",
    "LoopStatus",
    "Outcome",
    "OutputChunk",
    "QueueDashboard",
    "QueueSetting",
    "RuntimeLimits",
    "Status",
    "Wait",
    "WorkerHeartbeat",
    "WorkerKey",
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

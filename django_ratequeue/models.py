"""The app's models, defined beside the code that owns them.

Besides the models, the values their status fields take and the database their rows live
on: the admin, the API and the dashboard read the rows through this module.
"""

from django_ratequeue.engine.fairness.models import KeyLimit, KeyLimitChange, TurnState
from django_ratequeue.engine.models import (
    DEFERRED_STATUSES,
    FINAL_STATUSES,
    Attempt,
    CancelRequest,
    Job,
    LoopState,
    Outcome,
    OutputChunk,
    QueueDashboard,
    QueueSetting,
    RuntimeLimits,
    Wait,
    WorkerHeartbeat,
    WorkerKey,
    queue_connection,
    queue_db,
)
from django_ratequeue.plugins.batches.models import Batch
from django_ratequeue.plugins.rollups.models import QueueMinute, QueueTotal, RollupCursor
from django_ratequeue.plugins.schedules.models import Schedule
from django_ratequeue.plugins.unique.models import UniqueClaim
from django_ratequeue.ratelimit.models import RateLimitDecisionTotal, RateLimitState
from django_ratequeue.seats import RequestSeat

__all__ = [
    "Attempt",
    "Batch",
    "CancelRequest",
    "Job",
    "KeyLimit",
    "KeyLimitChange",
    "LoopState",
    "OutputChunk",
    "QueueDashboard",
    "QueueMinute",
    "QueueSetting",
    "QueueTotal",
    "RateLimitDecisionTotal",
    "RateLimitState",
    "RequestSeat",
    "RollupCursor",
    "RuntimeLimits",
    "Schedule",
    "TurnState",
    "UniqueClaim",
    "WorkerHeartbeat",
    "WorkerKey",
]

# The values of the rows' fields, and the database that holds them.
__all__ += [
    "DEFERRED_STATUSES",
    "FINAL_STATUSES",
    "Outcome",
    "Wait",
    "queue_connection",
    "queue_db",
]

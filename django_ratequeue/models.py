"""The app's models, defined beside the code that owns them."""

from django_ratequeue.engine.fairness.models import KeyLimit, KeyLimitChange, TurnState
from django_ratequeue.engine.models import (
    Attempt,
    CancelRequest,
    Job,
    LoopState,
    OutputChunk,
    QueueDashboard,
    QueueSetting,
    RuntimeLimits,
    WorkerHeartbeat,
    WorkerKey,
)
from django_ratequeue.engine.seats import RequestSeat
from django_ratequeue.plugins.batches.models import Batch
from django_ratequeue.plugins.rollups.models import QueueMinute, QueueTotal, RollupCursor
from django_ratequeue.plugins.schedules.models import Schedule
from django_ratequeue.plugins.unique.models import UniqueClaim
from django_ratequeue.ratelimit.models import RateLimitDecisionTotal, RateLimitState

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

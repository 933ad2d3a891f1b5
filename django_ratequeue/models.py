"""The app's models, defined beside the code that owns them."""

from .queue.models import (
    Attempt,
    Batch,
    CancelRequest,
    Job,
    KeyLimit,
    KeyLimitChange,
    LoopState,
    OutputChunk,
    QueueDashboard,
    QueueMinute,
    QueueSetting,
    QueueTotal,
    Schedule,
    UniqueClaim,
    WorkerHeartbeat,
    WorkerKey,
)
from .queue.seats import RequestSeat
from .ratelimit.models import RateLimitDecisionTotal, RateLimitState

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
    "Schedule",
    "UniqueClaim",
    "WorkerHeartbeat",
    "WorkerKey",
]

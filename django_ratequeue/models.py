"""The app's models, defined beside the code that owns them."""

from .queue.models import (
    Attempt,
    CancelRequest,
    Job,
    LoopState,
    OutputChunk,
    QueueDashboard,
    QueueMinute,
    QueueSetting,
    Schedule,
    WorkerHeartbeat,
    WorkerKey,
)
from .queue.seats import RequestSeat
from .ratelimit.models import RateLimitState

__all__ = [
    "Attempt",
    "CancelRequest",
    "Job",
    "LoopState",
    "OutputChunk",
    "QueueDashboard",
    "QueueMinute",
    "QueueSetting",
    "RateLimitState",
    "RequestSeat",
    "Schedule",
    "WorkerHeartbeat",
    "WorkerKey",
]

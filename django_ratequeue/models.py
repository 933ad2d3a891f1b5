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
    WorkerHeartbeat,
    WorkerKey,
)
from .queue.slots import ServerSlot
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
    "ServerSlot",
    "WorkerHeartbeat",
    "WorkerKey",
]

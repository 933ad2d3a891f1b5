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
    "WorkerHeartbeat",
    "WorkerKey",
]

"""The statuses of jobs, the outcomes and waits of attempts, the states of the loop."""

from __future__ import annotations

from django.db import models


class Status(models.TextChoices):
    """Where a job is in its life.

    The last three are final."""

    SCHEDULED = "scheduled", "Scheduled"
    WAITING = "waiting", "Waiting"
    RUNNING = "running", "Running"
    RETRYING = "retrying", "Retrying"
    FAILED = "failed", "Failed"
    COMPLETE = "complete", "Complete"
    CANCELED = "canceled", "Canceled"


FINAL_STATUSES = frozenset({Status.FAILED, Status.COMPLETE, Status.CANCELED})
# The order in which the WAITING jobs of one queue and concurrency key start: priority,
# then the jobs whose tokens are reserved (they start at their reserved time, in the
# order they reserved), then readiness: start_at, when the job became ready (enqueued,
# scheduled, or at the end of a retry's back-off), and arrival between equals.
READY_ORDER = ("-priority", "-tokens_reserved", "start_at", "created_at")
# Statuses whose job waits for its start_at before it becomes WAITING.
DEFERRED_STATUSES = (Status.SCHEDULED, Status.RETRYING)


class Outcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    NON_RETRYABLE = "non_retryable", "Failed, not retryable"
    TIMED_OUT = "timed_out", "Timed out"
    WORKER_LOST = "worker_lost", "Worker lost"


class Wait(models.TextChoices):
    """Where an attempt is in a wait on another job's result.

    An attempt that waits gives its slots back meanwhile."""

    NONE = "", "Holding its slots"
    WAITING = "waiting", "Waiting on a subtask"
    RESUMING = "resuming", "Asking for its slots back"


class LoopStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    RUNNING = "running", "Running"
    SCHEDULED = "scheduled", "Scheduled"
    SATURATED = "saturated", "Saturated"

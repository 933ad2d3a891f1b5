"""The jobs, their output and the requests to cancel them."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any, Protocol

from django.db import models

from django_ratequeue import clock
from django_ratequeue.engine.bounds import later
from django_ratequeue.engine.heads import LeaseHead, register_lease_head
from django_ratequeue.engine.models.statuses import (
    DEFERRED_STATUSES,
    FINAL_STATUSES,
    READY_ORDER,
    Outcome,
    Status,
)
from django_ratequeue.engine.retry import Retry
from django_ratequeue.exceptions import JobDoesNotExist

# The queue of a job enqueued without one, and of an unconfigured queue's limits.
DEFAULT_QUEUE = "default"


class AttemptEnd(Protocol):
    """What :meth:`Job.settle` reads of the attempt that ended (an ``Attempt`` row)."""

    @property
    def started_at(self) -> datetime | None: ...

    @property
    def outcome(self) -> str: ...

    @property
    def result(self) -> Any: ...

    @property
    def error(self) -> str: ...

    @property
    def traceback(self) -> str: ...

    @property
    def exception_class_path(self) -> str: ...


def new_job_id() -> str:
    """Return a random id that sorts by creation time (like a UUIDv7).

    The primary key index so grows at its end instead of being written all over."""
    return f"{int(clock.timestamp() * 1_000_000):013x}{secrets.token_hex(10)}"


class JobQuerySet(models.QuerySet["Job"]):
    """Change the status of a set of jobs, in one UPDATE each.

    Only the main loop calls these: producers insert, they never move a job."""

    def due(self, now: datetime) -> JobQuerySet:
        """Return the SCHEDULED and RETRYING jobs whose ``start_at`` has come."""
        return self.filter(status__in=DEFERRED_STATUSES, start_at__lte=now)

    def not_started(self) -> JobQuerySet:
        """Return the jobs a cancel ends at once: waiting, scheduled or retrying."""
        return self.filter(status__in=[Status.WAITING, *DEFERRED_STATUSES])

    def promote(self) -> int:
        """Make the deferred ones among these jobs WAITING (their time came)."""
        return self.filter(status__in=DEFERRED_STATUSES).update(status=Status.WAITING)

    def start(self) -> int:
        """Mark the WAITING ones among these jobs RUNNING with one more attempt (whose
        tokens it consumes); return how many."""
        return self.filter(status=Status.WAITING).update(
            status=Status.RUNNING, attempts=models.F("attempts") + 1, tokens_reserved=False
        )

    def reserve(self, start_at: datetime) -> int:
        """Record that the WAITING ones among these jobs have their cost reserved from their
        queue's rate limit, until ``start_at``; return how many."""
        return self.filter(status=Status.WAITING).update(tokens_reserved=True, start_at=start_at)

    def cancel(self, now: datetime) -> int:
        """End the ones among these jobs not started yet CANCELED; return how many."""
        return self.not_started().update(status=Status.CANCELED, finished_at=now)

    def request_cancel(self) -> int:
        """Ask these running jobs to end CANCELED when their attempt ends."""
        return self.update(cancel_requested=True)

    def fail(self, error: str, now: datetime) -> int:
        """Fail, with ``error``, the jobs of these that are not final yet.

        It is the loop's own verdict, so with no traceback nor exception class."""
        return self.exclude(status__in=FINAL_STATUSES).update(
            status=Status.FAILED,
            error=error,
            traceback="",
            exception_class_path="",
            finished_at=now,
        )


class Job(models.Model):
    """One unit of work, from enqueue to its final status; kept for RETENTION afterwards."""

    id = models.CharField(primary_key=True, max_length=200)
    func = models.CharField("function", max_length=300)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=200, default=DEFAULT_QUEUE)
    # The max_concurrency given at enqueue for a queue not configured in settings.
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    concurrency_key = models.CharField(max_length=255, blank=True, default="")
    priority = models.IntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WAITING)
    # When the job may start: the schedule, or the next retry while RETRYING.
    start_at = models.DateTimeField()
    created_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    retry = models.JSONField(help_text="The Retry policy's fields.")
    timeout = models.FloatField(null=True, blank=True, help_text="Seconds per attempt.")
    on_complete = models.CharField(max_length=300, blank=True, default="")
    context = models.JSONField(null=True, blank=True)
    owner = models.CharField(max_length=255, blank=True, default="")
    cost = models.PositiveIntegerField(default=1)
    # A rate-gated queue's job whose next attempt's tokens are reserved: it starts at its
    # start_at (the time the reservation gave) without drawing again.
    tokens_reserved = models.BooleanField(default=False)
    cancel_requested = models.BooleanField(default=False)
    # The job that enqueued this one from inside its own run, if any.
    parent_id = models.CharField(max_length=200, blank=True, default="")
    # The batch the job belongs to, if any (a Batch's id; docs/batches.md). Empty by default
    # in the database too, for INSERTs that name the columns they set.
    batch_id = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The W3C traceparent of the enqueue's span, which its attempts' spans continue
    # (docs/tracing.md); empty without OpenTelemetry.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    # The class of the exception, as "builtins.ValueError" (empty if it raised none).
    exception_class_path = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)
    # The latest report_progress() of its running attempt, a JSON object (written by the
    # attempt's runner, at most every PROGRESS_INTERVAL: see engine/progress.py).
    progress = models.JSONField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = "job"
        indexes = [
            # The dispatch reads: the concurrency keys of queue Q with work ready (a skip
            # scan), and the next jobs of each key in the order they start (READY_ORDER).
            models.Index(
                fields=["status", "queue", "concurrency_key", *READY_ORDER],
                name="ratequeue_job_ready_by_key",
            ),
            # Scheduled starts and retries that have come due. Partial, like the next one, so
            # that enqueueing a WAITING job writes neither.
            models.Index(
                fields=["status", "start_at"],
                name="ratequeue_job_due",
                condition=models.Q(status__in=DEFERRED_STATUSES),
            ),
            # The admin's list, newest first (it orders by -created_at, then -id).
            models.Index(fields=["created_at", "id"], name="ratequeue_job_created"),
            # Retention.
            models.Index(
                fields=["finished_at"],
                name="ratequeue_job_finished",
                condition=models.Q(finished_at__isnull=False),
            ),
            # A job's children (jobs it enqueued while it ran), for its admin page. Partial:
            # only child jobs write it.
            models.Index(
                fields=["parent_id", "created_at"],
                name="ratequeue_job_children",
                condition=~models.Q(parent_id=""),
            ),
            # A batch's jobs by status: its counts, and "has any job not ended?" as a few
            # index probes. Partial: only batched jobs write it.
            models.Index(
                fields=["batch_id", "status"],
                name="ratequeue_job_batch",
                condition=~models.Q(batch_id=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.func} [{self.id}]"

    def settle(self, attempt: AttemptEnd, now: datetime) -> None:
        """Set this RUNNING job's status from the end of ``attempt``, its current one.

        Nothing is saved. The job becomes complete, canceled, failed or retrying after its
        policy's back-off; waiting again when the attempt never started (it was no try),
        unless the loop ended it with an outcome (no worker knew its function). A
        final status is reached at ``now``. The one place that decides it: the loop saves
        it, and the django.tasks backend shows it for a job whose attempt ended before the
        loop took it in."""
        if attempt.started_at is None and self.cancel_requested:
            self.status = Status.CANCELED
        elif attempt.started_at is None and not attempt.outcome:
            self.status, self.attempts = Status.WAITING, self.attempts - 1
        elif attempt.outcome == Outcome.SUCCEEDED:
            self.status = Status.CANCELED if self.cancel_requested else Status.COMPLETE
            self.result = attempt.result
            self.error = self.traceback = self.exception_class_path = ""
        else:
            self.error, self.traceback = attempt.error, attempt.traceback
            self.exception_class_path = attempt.exception_class_path
            policy = Retry(**self.retry)
            if self.cancel_requested:
                self.status = Status.CANCELED
            elif attempt.outcome == Outcome.NON_RETRYABLE or self.attempts > policy.retry_count:
                self.status = Status.FAILED
            else:
                self.status = Status.RETRYING
                self.start_at = later(now, policy.delay(self.attempts))
        if self.status in FINAL_STATUSES:
            self.finished_at = now


# The package's own exception, rather than the class the model metaclass made, so that a
# missing job raises the same class everywhere: from the ORM, a handle or the backend, and
# ``except Job.DoesNotExist`` in existing code still catches it. (django-stubs types the
# attribute as the class the metaclass made, which this replaces on purpose.)
Job.DoesNotExist = JobDoesNotExist  # type: ignore[misc, assignment]


class QueueDashboard(Job):
    """Put the admin's queue dashboard in a row of the admin's index.

    Only a model gets one: a proxy of the jobs, so no table, and no permission of its own
    (the dashboard needs the view permission on jobs). Its admin (admin/dashboard.py)
    opens the dashboard."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = verbose_name_plural = "queue dashboard"


class OutputChunk(models.Model):
    """A piece of a job's partial output (``stream_output``).

    Pieces are numbered from 1 in the order they were streamed, across the job's attempts.
    One row holds what a running attempt streamed between two writes (engine/progress.py),
    so a job streaming a token at a time writes a row every PROGRESS_INTERVAL, not one per
    token."""

    # Indexed by the (job, index) constraint, which serves every read.
    job = models.ForeignKey(
        Job, on_delete=models.DO_NOTHING, related_name="output_set", db_index=False
    )
    index = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        verbose_name = "output chunk"
        constraints = [
            models.UniqueConstraint(fields=["job", "index"], name="ratequeue_output_job_index")
        ]

    def __str__(self) -> str:
        return f"output {self.index} of {self.job_id}"


class CancelRequest(models.Model):
    """A producer's request to cancel one job, a queue's jobs (``queue``), or all (neither)."""

    job_id = models.CharField(max_length=200, blank=True, default="")
    queue = models.CharField(max_length=200, blank=True, default="")
    # A batch's jobs (all of them, whenever they were enqueued).
    batch_id = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "cancel request"

    def __str__(self) -> str:
        return f"cancel {self.job_id or self.queue or 'all jobs'}"


# Whether cancel requests wait: the cancel phase reads them only then.
register_lease_head(
    LeaseHead(
        "cancels_waiting",
        lambda connection: [
            f"EXISTS (SELECT 1 FROM {connection.ops.quote_name(CancelRequest._meta.db_table)})"
        ],
        lambda values: bool(values[0]),
    )
)

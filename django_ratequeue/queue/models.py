"""The queue's tables, and the state changes of their rows (on the models and querysets).

Producers insert :class:`Job` and :class:`CancelRequest` rows; workers claim and end the
:class:`Attempt` rows through the attempt protocol (:mod:`.protocol`); only the main loop
moves a job between statuses, creates attempts and finalises them. docs/concepts.md
("Tables and who writes them") tells who writes what.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db import connections, models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q

from .. import clock
from ..exceptions import JobDoesNotExist
from .bounds import later
from .retry import Retry


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
        """Mark these jobs RUNNING with one more attempt (whose tokens it consumes)."""
        return self.update(
            status=Status.RUNNING, attempts=models.F("attempts") + 1, tokens_reserved=False
        )

    def reserve(self, start_at: datetime) -> int:
        """Record that these jobs' cost is reserved from their queue's rate limit.

        It is reserved until ``start_at``."""
        return self.update(tokens_reserved=True, start_at=start_at)

    def cancel(self, now: datetime) -> int:
        """End these (not started) jobs CANCELED."""
        return self.update(status=Status.CANCELED, finished_at=now)

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
    queue = models.CharField(max_length=200, default="default")
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
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    # The class of the exception, as "builtins.ValueError" (empty if it raised none).
    exception_class_path = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)
    # The latest report_progress() of its running attempt, a JSON object (written by the
    # attempt's runner, at most every PROGRESS_INTERVAL: see queue/progress.py).
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
        ]

    def __str__(self) -> str:
        return f"{self.func} [{self.id}]"

    def settle(self, attempt: Attempt, now: datetime) -> None:
        """Set this RUNNING job's status from the end of ``attempt``, its current one.

        Nothing is saved. The job becomes complete, canceled, failed or retrying after its
        policy's back-off; waiting again when the attempt never started (it was no try). A
        final status is reached at ``now``. The one place that decides it: the loop saves
        it, and the django.tasks backend shows it for a job whose attempt ended before the
        loop took it in."""
        if attempt.started_at is None and self.cancel_requested:
            self.status = Status.CANCELED
        elif attempt.started_at is None:
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


class AttemptQuerySet(models.QuerySet["Attempt"]):
    """Change a set of attempts, as the loop and subtask waits do.

    Workers' claims and reports are the attempt protocol's conditional UPDATEs
    (:mod:`.protocol`)."""

    def finalize(self) -> int:
        """Free these attempts' slots: the loop took their outcomes in."""
        return self.update(active=False)

    def end_unstarted(self, now: datetime, error: str) -> int:
        """End the attempts of these that no runner started yet.

        A runner's claim needs ``started_at`` still empty, so exactly one side wins."""
        return self.filter(active=True, started_at=None, ended_at=None).update(
            ended_at=now, error=error
        )

    def wait_on(self, queue: str) -> int:
        """Make these attempts wait on a job of ``queue``, their slots free meanwhile."""
        return self.update(wait=Wait.WAITING, wait_queue=queue)

    def ask_to_resume(self) -> int:
        return self.update(wait=Wait.RESUMING)

    def resume(self) -> int:
        """Give these attempts their slots back.

        The loop grants a resume, or a wait ends with every worker blocked."""
        return self.update(wait=Wait.NONE, wait_queue="")


# What the run of an attempt reports on it: written by its runner (or remote worker),
# read by the loop to finish its job.
REPORT_FIELDS = (
    "started_at",
    "ended_at",
    "outcome",
    "result",
    "error",
    "traceback",
    "exception_class_path",
)


class Attempt(models.Model):
    """One try at a job: created by the loop, claimed and ended by a runner.

    ``active`` stays true until the loop has taken the attempt's outcome into account, so
    the active attempts are exactly the ones that hold a concurrency slot.
    """

    job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, related_name="attempt_set")
    number = models.PositiveIntegerField()
    queue = models.CharField(max_length=200)
    concurrency_key = models.CharField(max_length=255, blank=True, default="")
    timeout = models.FloatField(null=True, blank=True)
    active = models.BooleanField(default=True)
    dispatched_at = models.DateTimeField()
    # Who holds it: a local runner's process (its WorkerHeartbeat id), or an instance of a
    # remote worker (the name the program gave itself) with ``worker_key``. "" for nobody.
    worker = models.CharField(max_length=64, blank=True, default="")
    worker_key = models.ForeignKey(
        "WorkerKey",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="attempts",
        help_text="The key of the remote worker that claimed it (none for a local runner).",
    )
    # Its queue is served by remote workers (``"remote": True``), which claim it over HTTP;
    # runners never do. Decided at dispatch.
    remote = models.BooleanField(default=False)
    # A remote attempt's lease: its worker's heartbeats extend it; once it lapses the
    # attempt is lost (recovery ends it). None for the attempts of local runners, whose
    # worker's WorkerHeartbeat says whether they live.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True, default="")
    wait = models.CharField(max_length=8, choices=Wait.choices, blank=True, default=Wait.NONE)
    # While waiting: the queue of the awaited job (its own queue slot is freed if the same).
    wait_queue = models.CharField(max_length=200, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    # The class of the exception, as "builtins.ValueError" (empty if it raised none).
    exception_class_path = models.TextField(blank=True, default="")

    objects = AttemptQuerySet.as_manager()

    class Meta:
        verbose_name = "attempt"
        indexes = [
            # Partial indexes hold only the few rows the hot paths read, however many ended
            # attempts are kept, and are used before the table's first ANALYZE: the
            # loop's read of the active attempts, and the runners' claim.
            models.Index(fields=["id"], condition=Q(active=True), name="ratequeue_attempt_active"),
            models.Index(
                fields=["id"],
                condition=Q(active=True, worker="", ended_at=None),
                name="ratequeue_attempt_claimable",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.job_id}"

    @property
    def worker_label(self) -> str:
        """Return who holds the attempt, to show.

        That is a local runner's id, or ``<key name>/<instance>`` for a remote worker
        (read the key with ``select_related("worker_key")``)."""
        if self.worker_key is None:
            return self.worker
        return f"{self.worker_key.name}/{self.worker}"

    @property
    def holds_environment_slot(self) -> bool:
        """Return whether the attempt holds a ``MAX_CONCURRENCY`` slot.

        An attempt waiting on a subtask gives it back."""
        return self.wait == Wait.NONE

    @property
    def holds_queue_slot(self) -> bool:
        """Return whether the attempt holds a slot of its queue.

        A waiting attempt keeps it unless the job it waits on runs in its queue."""
        return self.wait == Wait.NONE or self.wait_queue != self.queue


class OutputChunk(models.Model):
    """A piece of a job's partial output (``stream_output``).

    Pieces are numbered from 1 in the order they were streamed, across the job's attempts.
    One row holds what a running attempt streamed between two writes (queue/progress.py),
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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "cancel request"

    def __str__(self) -> str:
        return f"cancel {self.job_id or self.queue or 'all jobs'}"


class LoopStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    RUNNING = "running", "Running"
    SCHEDULED = "scheduled", "Scheduled"
    SATURATED = "saturated", "Saturated"


class LoopStateQuerySet(models.QuerySet["LoopState"]):
    """Change the loop's lease with conditional UPDATEs.

    Each wins only while the row still has the ``generation`` (and whatever else) its
    caller saw, so of several contenders one wins."""

    def take(self, generation: int, until: datetime, now: datetime, leader: str = "") -> bool:
        """Lead the loop from the generation after ``generation``, if that is still current.

        Of several contenders one wins. ``leader``: the winner's worker id."""
        return bool(
            self.filter(pk=LoopState.SINGLETON, generation=generation).update(
                generation=generation + 1,
                state=LoopStatus.RUNNING,
                lease_expires_at=until,
                updated_at=now,
                leader=leader,
            )
        )

    def ensure(self) -> LoopState:
        """Return the singleton, created if it does not exist yet."""
        state, _created = self.get_or_create(pk=LoopState.SINGLETON)
        return state

    def rest(self, state: str, wake: datetime | None) -> None:
        """Record what a step left the loop doing (inside that step's renewed lease)."""
        self.filter(pk=LoopState.SINGLETON).update(state=state, next_wake_at=wake)


class LoopState(models.Model):
    """The main loop's singleton row (pk 1); its ``generation`` admits one loop at a time."""

    SINGLETON = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON)
    generation = models.BigIntegerField(default=0)
    # The worker (WorkerHeartbeat id) whose agent leads the loop since it took ``generation``.
    leader = models.CharField(max_length=64, blank=True, default="")
    state = models.CharField(max_length=10, choices=LoopStatus.choices, default=LoopStatus.IDLE)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_wake_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    # Per queue, the concurrency key that got the last start: the next round begins after it.
    key_cursors = models.JSONField(default=dict, blank=True)
    # The queue that got the last start: the next step's turn over the queues begins after it.
    queue_cursor = models.CharField(max_length=200, blank=True, default="")
    # MAX_CONCURRENCY as changed at runtime (queue/control.py); None: the setting.
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    # The jobs created before this time are counted in the rollups' ``enqueued``
    # (queue/rollups.py); None: none yet, counting starts at the next step.
    arrivals_until = models.DateTimeField(null=True, blank=True)

    objects = LoopStateQuerySet.as_manager()

    class Meta:
        verbose_name = "loop state"

    def __str__(self) -> str:
        return f"loop {self.state} (generation {self.generation})"


class QueueSetting(models.Model):
    """A queue's limits changed at runtime (admin, ``ratequeue_queue``, ``pause_queue``...).

    They override ``RATEQUEUE["QUEUES"]`` until removed. Written by people, read by the
    loop at every step (the table holds one row per queue ever changed)."""

    name = models.CharField(primary_key=True, max_length=200)
    # None: as configured in settings.
    paused = models.BooleanField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    total_concurrency = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "queue setting"

    def __str__(self) -> str:
        return self.name


class WorkerHeartbeat(models.Model):
    """Proof of life of one django-q2 worker process, refreshed by its agent thread.

    It also says whether a runner serves the queue in it now (the loop asks for runners by
    this)."""

    id = models.CharField(primary_key=True, max_length=64)
    pid = models.PositiveIntegerField()
    host = models.CharField(max_length=255)
    seen_at = models.DateTimeField()
    serving = models.BooleanField(default=False)

    class Meta:
        verbose_name = "worker heartbeat"

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


# The histograms' bucket bounds, in seconds: 1 ms doubling up to 2**22 ms (about 70 min).
# Bucket 0 holds the samples under 1 ms, bucket i (1 to 22) those in [bound i-1, bound i),
# and bucket 23 those of 2**22 ms and more. Fixed, so that any minutes' buckets add up.
HISTOGRAM_BOUNDS: tuple[float, ...] = tuple(0.001 * 2**k for k in range(23))
HISTOGRAM_BUCKETS = len(HISTOGRAM_BOUNDS) + 1
# The histograms a minute keeps, each as HISTOGRAM_BUCKETS columns named "<name>_h<i>".
HISTOGRAMS = ("wait", "run")
# Every column a rollup sums, in order: the counts, then the histograms' buckets.
COUNT_FIELDS = (
    "enqueued",
    "started",
    "completed",
    "failed",
    "retried",
    "canceled",
    "tokens_reserved",
    "tokens_spent",
)


def bucket_field(histogram: str, bucket: int) -> str:
    return f"{histogram}_h{bucket:02d}"


BUCKET_FIELDS = tuple(
    bucket_field(name, bucket) for name in HISTOGRAMS for bucket in range(HISTOGRAM_BUCKETS)
)
SUMMED_FIELDS = (*COUNT_FIELDS, *BUCKET_FIELDS)


class QueueMinute(models.Model):
    """What one queue did in one minute (UTC), kept by the loop as it moves jobs.

    :mod:`.rollups` tells what each figure counts. The dashboard's series read these rows,
    never the jobs table. Every figure is a sum, so minutes add up to hours and days;
    the wait and run times are histograms over :data:`HISTOGRAM_BOUNDS` (the ``wait_h<i>``
    and ``run_h<i>`` columns, added below) from which percentiles are read. Every figure
    has a database default of 0: the loop's UPSERT names only the ones it adds to."""

    queue = models.CharField(max_length=200)
    minute = models.DateTimeField(help_text="The minute's start, UTC.")
    enqueued = models.PositiveIntegerField(db_default=0)
    started = models.PositiveIntegerField(db_default=0)
    completed = models.PositiveIntegerField(db_default=0)
    failed = models.PositiveIntegerField(db_default=0)
    retried = models.PositiveIntegerField(db_default=0)
    canceled = models.PositiveIntegerField(db_default=0)
    tokens_reserved = models.PositiveBigIntegerField(db_default=0)
    tokens_spent = models.PositiveBigIntegerField(db_default=0)

    class Meta:
        verbose_name = "queue minute"
        constraints = [
            # The loop's UPSERT conflicts on it; it also serves a queue's reads by range.
            models.UniqueConstraint(fields=["queue", "minute"], name="ratequeue_minute_queue")
        ]
        indexes = [
            # The reads over all queues by range, and retention.
            models.Index(fields=["minute"], name="ratequeue_minute_at"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} at {self.minute:%Y-%m-%d %H:%M}"


for _field in BUCKET_FIELDS:
    QueueMinute.add_to_class(_field, models.PositiveIntegerField(db_default=0))


class WorkerKey(models.Model):
    """The API key of remote workers (``Authorization: Api-Key <key>``), scoped to queues.

    Only the key's SHA-256 is stored, and its ``prefix`` in clear to find it and show it:
    the key is shown once, at creation. A key is 256 random bits, so a fast hash is as
    safe as a slow one. Revoking it stops every request made with it at once."""

    name = models.CharField(max_length=200, help_text="Who or what uses it.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed = models.CharField("SHA-256", max_length=64, editable=False)
    queues = models.JSONField(default=list, help_text="The remote queues it may claim from.")
    created_at = models.DateTimeField(editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When a request last used it (written at most once per LAST_SEEN_EVERY seconds).
    last_seen = models.DateTimeField(null=True, blank=True, editable=False)
    # The host name the worker program gave with its last claim.
    last_host = models.CharField(max_length=255, blank=True, default="", editable=False)

    class Meta:
        verbose_name = "worker key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


def queue_db() -> str:
    """Return the database alias the queue's tables live on, as the project's routers say."""
    return router.db_for_write(Job)


def queue_connection() -> BaseDatabaseWrapper:
    """Return the connection to :func:`queue_db`, for the queue's raw SQL."""
    return connections[queue_db()]

"""The attempts: one try at a job each, claimed and ended by a runner."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q

from django_ratequeue.engine.models.jobs import Job
from django_ratequeue.engine.models.statuses import Outcome, Wait


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

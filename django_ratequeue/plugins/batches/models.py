"""The batches: groups of jobs with one completion (docs/batches.md)."""

from __future__ import annotations

from django.db import models

from django_ratequeue.engine.models.jobs import Job, JobQuerySet
from django_ratequeue.engine.models.statuses import FINAL_STATUSES, Status

# The statuses of a job that has not ended yet.
UNFINISHED_STATUSES = tuple(status for status in Status if status not in FINAL_STATUSES)


def batch_jobs(batch_id: str) -> JobQuerySet:
    """Return the jobs of batch ``batch_id``, read through the partial index of batched jobs.

    The index's own condition (``batch_id <> ''``) is in the query: SQLite uses a
    partial index only for a query that states its condition."""
    return Job.objects.filter(batch_id=batch_id).exclude(batch_id="")


def batch_callback_id(batch_id: str) -> str:
    """Return the id of the ``on_complete`` job of batch ``batch_id``.

    Derived from the batch's id, so that a second one could never be written."""
    return f"batch-{batch_id}-on-complete"


class Batch(models.Model):
    """A group of jobs whose ``on_complete`` job runs once, when all of them have ended.

    Its jobs point at it by ``Job.batch_id``. The batch is open while its ``with``
    block runs, sealed when the block exits, and finished by the loop (or the seal)
    in the transaction that sees its last job ended."""

    id = models.CharField(primary_key=True, max_length=200)
    owner = models.CharField(max_length=255, blank=True, default="")
    on_complete = models.CharField(max_length=300, blank=True, default="")
    context = models.JSONField(null=True, blank=True)
    # Jobs of the batch: counted when it is sealed, and again when it finishes (fan-out).
    total = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    sealed_at = models.DateTimeField(null=True, blank=True)
    canceled_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # What the callback receives, written when the batch finishes.
    outcome = models.JSONField(null=True, blank=True)
    # The id of its on_complete job (batch_callback_id), once created.
    callback_id = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        verbose_name = "batch"
        verbose_name_plural = "batches"
        indexes = [
            # The admin's list, newest first.
            models.Index(fields=["created_at", "id"], name="ratequeue_batch_created"),
            # Sealed batches not finished yet: what the loop's recovery looks at. Partial:
            # a finished batch leaves it.
            models.Index(
                fields=["sealed_at"],
                name="ratequeue_batch_ending",
                condition=models.Q(finished_at__isnull=True, sealed_at__isnull=False),
            ),
            # Retention.
            models.Index(
                fields=["finished_at"],
                name="ratequeue_batch_finished",
                condition=models.Q(finished_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.id}"

"""Retry failed (or canceled) jobs as new jobs, each at most once, and discard them.

The admin's job page, its failed-jobs view and ``manage.py ratequeue_failed`` all retry
through :func:`retry`, so a double click, two operators or a command run twice make one
copy. docs/admin.md ("Failed jobs") tells how they are shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet, Value
from django.db.models.functions import Concat

from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.models import Attempt, Job, OutputChunk, Status, queue_db
from django_ratequeue.engine.retry import Retry
from django_ratequeue.intake.enqueue import JOB_ID_MAX_LENGTH, enqueue

RETRYABLE_STATUSES = (Status.FAILED, Status.CANCELED)
# A copy's id is its original's with this suffix: the id says which job it retries, and a
# second retry of the same job finds it taken.
RETRY_SUFFIX = ".retry"


@dataclass(frozen=True)
class Retried:
    """What :func:`retry` did: the copy's handle, and whether this call enqueued it."""

    handle: Handle[Any]
    enqueued: bool


def retry_id(job_id: str) -> str | None:
    """Return the id of ``job_id``'s retry, None when that would be too long for an id."""
    copy = job_id + RETRY_SUFFIX
    return copy if len(copy) <= JOB_ID_MAX_LENGTH else None


def retry(job: Job) -> Retried:
    """Enqueue the call ``job`` made, with its options, as a new job starting now, once.

    The copy's id is :func:`retry_id`'s: when it is taken, the copy is there already and
    its handle is returned. (An original whose id is too long for a suffix is copied
    under a new id every time.) TypeError or ValueError when the call no longer fits."""
    queue: Any = job.queue
    if job.max_concurrency is not None:
        queue = {"name": job.queue, "max_concurrency": job.max_concurrency}
    copy_id = retry_id(job.pk)
    if copy_id is not None and Job.objects.filter(pk=copy_id).exists():
        return Retried(Handle(copy_id, owner=job.owner or None), enqueued=False)
    handle = enqueue(
        job.func,
        args=job.args,
        kwargs=job.kwargs,
        queue=queue,
        concurrency_key=job.concurrency_key,
        priority=job.priority,
        retries=Retry(**job.retry),
        timeout=job.timeout,
        on_complete=job.on_complete or None,
        context=job.context,
        owner=job.owner or None,
        cost=job.cost,
        id=copy_id,
        on_duplicate_id="ignore",
    )
    return Retried(handle, enqueued=True)


def not_retried(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Return the failed or canceled jobs of ``jobs`` that no retry copied yet."""
    copies = Job.objects.filter(pk=Concat(OuterRef("pk"), Value(RETRY_SUFFIX)))
    return jobs.filter(status__in=RETRYABLE_STATUSES).exclude(Exists(copies))


def discard(job_ids: Iterable[str]) -> int:
    """Delete the failed or canceled jobs among ``job_ids``, with their attempts and output.

    Return how many jobs went; jobs in any other status are left as they are."""
    with transaction.atomic(using=queue_db()):
        ids = list(
            Job.objects.filter(pk__in=list(job_ids), status__in=RETRYABLE_STATUSES)
            .select_for_update()
            .values_list("pk", flat=True)
        )
        Attempt.objects.filter(job_id__in=ids).delete()
        OutputChunk.objects.filter(job_id__in=ids).delete()
        return Job.objects.filter(pk__in=ids).delete()[0]

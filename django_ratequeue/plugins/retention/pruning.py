"""Retention: the pruning of finished jobs and old per-minute figures.

Finished jobs are kept RETENTION seconds for ``result()`` and the admin, with their
attempts and output; the queues' per-minute figures ROLLUP_RETENTION seconds. The resting
loop prunes a small batch now and then (:func:`prune_in_background`), ``manage.py
ratequeue_prune`` all that is due (docs/concepts.md, "Retention").
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.models import (
    Attempt,
    Job,
    OutputChunk,
    Status,
    WorkerHeartbeat,
    queue_db,
)
from django_ratequeue.plugins.batches.models import Batch
from django_ratequeue.plugins.rollups.models import QueueMinute
from django_ratequeue.plugins.unique.claims import live_claims, prune_claims
from django_ratequeue.ratelimit.prune import prune_full_rows

BACKGROUND_EVERY = 60.0
BACKGROUND_BATCH = 500
_next_background_prune = 0.0


def prune_jobs(limit: int) -> int:
    """Delete up to ``limit`` jobs past their retention; return how many.

    That is complete and canceled jobs finished more than RETENTION ago, failed ones more
    than FAILED_RETENTION ago."""
    settings = ratequeue_settings()
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.RETENTION)
    failed_cutoff = now - timedelta(seconds=settings.FAILED_RETENTION)
    with transaction.atomic(using=queue_db()):
        due = Job.objects.filter(finished_at__lt=max(cutoff, failed_cutoff))
        if cutoff != failed_cutoff:
            due = due.exclude(status=Status.FAILED, finished_at__gte=failed_cutoff).exclude(
                ~Q(status=Status.FAILED), finished_at__gte=cutoff
            )
        # A job that answers a live unique_for window is kept: its handle still reads.
        due = due.exclude(pk__in=live_claims().values("job_id"))
        ids = list(due.values_list("pk", flat=True)[:limit])
        if ids:
            Attempt.objects.filter(job_id__in=ids).delete()
            OutputChunk.objects.filter(job_id__in=ids).delete()
            Job.objects.filter(pk__in=ids).delete()
    return len(ids)


def prune_batches(limit: int) -> int:
    """Delete up to ``limit`` batches finished more than RETENTION ago; return how many."""
    cutoff = timezone.now() - timedelta(seconds=ratequeue_settings().RETENTION)
    ids = list(Batch.objects.filter(finished_at__lt=cutoff).values_list("pk", flat=True)[:limit])
    if ids:
        Batch.objects.filter(pk__in=ids).delete()
    return len(ids)


def prune_rollups(limit: int | None = None) -> int:
    """Delete the per-minute figures older than ROLLUP_RETENTION; return how many.

    At most ``limit`` rows are deleted, if given."""
    cutoff = timezone.now() - timedelta(seconds=ratequeue_settings().ROLLUP_RETENTION)
    old = QueueMinute.objects.filter(minute__lt=cutoff)
    if limit is not None:
        old = QueueMinute.objects.filter(pk__in=list(old.values_list("pk", flat=True)[:limit]))
    return old.delete()[0]


def prune_heartbeats() -> int:
    """Forget worker processes not seen for a day."""
    cutoff = timezone.now() - timedelta(days=1)
    return WorkerHeartbeat.objects.filter(seen_at__lt=cutoff).delete()[0]


def prune(batch_size: int = 1000) -> int:
    """Prune every job that is due, in batches; return how many jobs were deleted.

    The per-minute figures that are due, and old heartbeats, go with them."""
    total = 0
    while count := prune_jobs(batch_size):
        total += count
    while prune_rollups(batch_size):
        pass
    while prune_claims(batch_size):
        pass
    while prune_batches(batch_size):
        pass
    prune_heartbeats()
    return total


def prune_in_background() -> None:
    """Prune one small batch, at most once a minute per process.

    The resting loop calls it. The batch holds jobs, per-minute figures, old heartbeats
    and rate-limit rows that are full again (:mod:`..ratelimit.prune`)."""
    global _next_background_prune
    if time.monotonic() < _next_background_prune:
        return
    _next_background_prune = time.monotonic() + BACKGROUND_EVERY
    prune_jobs(BACKGROUND_BATCH)
    prune_rollups(BACKGROUND_BATCH)
    prune_claims(BACKGROUND_BATCH)
    prune_batches(BACKGROUND_BATCH)
    prune_heartbeats()
    prune_full_rows(BACKGROUND_BATCH)

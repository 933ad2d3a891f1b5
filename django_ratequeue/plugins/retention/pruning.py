"""Retention: the pruning of finished jobs, and of every plug-in's rows past their own.

Finished jobs are kept RETENTION seconds for ``result()`` and the admin, with their
attempts and output, and while a plug-in keeps them (:func:`.hooks.add_kept_jobs`); each
plug-in that keeps rows prunes its own (:func:`.hooks.add_pruning`). The resting loop
prunes a small batch now and then (:func:`prune_in_background`), ``manage.py
ratequeue_prune`` all that is due (docs/concepts.md, "Retention").
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import hooks
from django_ratequeue.engine.models import (
    Attempt,
    Job,
    OutputChunk,
    Status,
    WorkerHeartbeat,
    queue_db,
)
from django_ratequeue.ratelimit.prune import prune_full_rows

BACKGROUND_EVERY = 60.0
BACKGROUND_BATCH = 500
_next_background_prune = 0.0


def prune_jobs(limit: int) -> int:
    """Delete up to ``limit`` jobs past their retention; return how many.

    That is complete and canceled jobs finished more than RETENTION ago, failed ones more
    than FAILED_RETENTION ago, but for the jobs a plug-in keeps."""
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
        # As a job that answers a live unique_for window: its handle still reads.
        for kept in hooks.kept_jobs():
            due = due.exclude(pk__in=kept)
        ids = list(due.values_list("pk", flat=True)[:limit])
        if ids:
            Attempt.objects.filter(job_id__in=ids).delete()
            OutputChunk.objects.filter(job_id__in=ids).delete()
            Job.objects.filter(pk__in=ids).delete()
    return len(ids)


def prune_heartbeats() -> int:
    """Forget worker processes not seen for a day."""
    cutoff = timezone.now() - timedelta(days=1)
    return WorkerHeartbeat.objects.filter(seen_at__lt=cutoff).delete()[0]


def prune(batch_size: int = 1000) -> int:
    """Prune every job that is due, in batches; return how many jobs were deleted.

    Then every plug-in's rows that are due (the batches', the per-minute figures, the
    unique claims), and old heartbeats."""
    total = 0
    while count := prune_jobs(batch_size):
        total += count
    for prune_rows in hooks.prunings():
        while prune_rows(batch_size):
            pass
    prune_heartbeats()
    return total


def prune_in_background() -> None:
    """Prune one small batch, at most once a minute per process.

    The resting loop calls it. The batch holds jobs, each plug-in's rows, old heartbeats
    and rate-limit rows that are full again (:mod:`..ratelimit.prune`)."""
    global _next_background_prune
    if time.monotonic() < _next_background_prune:
        return
    _next_background_prune = time.monotonic() + BACKGROUND_EVERY
    prune_jobs(BACKGROUND_BATCH)
    for prune_rows in hooks.prunings():
        prune_rows(BACKGROUND_BATCH)
    prune_heartbeats()
    prune_full_rows(BACKGROUND_BATCH)

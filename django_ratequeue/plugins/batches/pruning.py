"""Prune the batches finished more than RETENTION ago (retention asks, engine/hooks.py)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.plugins.batches.models import Batch


def prune_batches(limit: int) -> int:
    """Delete up to ``limit`` batches finished more than RETENTION ago; return how many."""
    cutoff = timezone.now() - timedelta(seconds=ratequeue_settings().RETENTION)
    ids = list(Batch.objects.filter(finished_at__lt=cutoff).values_list("pk", flat=True)[:limit])
    if ids:
        Batch.objects.filter(pk__in=ids).delete()
    return len(ids)

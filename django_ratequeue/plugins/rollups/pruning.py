"""Prune the per-minute figures older than ROLLUP_RETENTION (retention asks, engine/hooks.py).

The queues' totals are never pruned: they only grow."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.plugins.rollups.models import QueueMinute


def prune_rollups(limit: int | None = None) -> int:
    """Delete the per-minute figures older than ROLLUP_RETENTION; return how many.

    At most ``limit`` rows are deleted, if given."""
    cutoff = timezone.now() - timedelta(seconds=ratequeue_settings().ROLLUP_RETENTION)
    old = QueueMinute.objects.filter(minute__lt=cutoff)
    if limit is not None:
        old = QueueMinute.objects.filter(pk__in=list(old.values_list("pk", flat=True)[:limit]))
    return old.delete()[0]

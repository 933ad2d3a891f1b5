"""Forgetting rate-limit rows that are full again.

A missing row is a full limit, so a row whose value, projected to now, is back at its
capacity (and so holds no reservation) says nothing that a missing row does not. Without
pruning, a limit keyed per client keeps a row for every client it ever saw. The resting
loop prunes a batch now and then (:func:`.queue.retention.prune_in_background`);
``manage.py ratelimits prune`` prunes them all.

Only limits in ``RATE_LIMITS`` are pruned: the configuration of an inline ``config=`` is
not known here. A cheap SQL test picks rows that are surely full (the time since their
``ts`` refilled what they miss, with a period to spare for a fixed window's steps); the
engine's own algebra confirms each one. They are locked while this happens, skipping rows
a consumer holds (PostgreSQL), so a consume that commits meanwhile keeps its row.
"""

from __future__ import annotations

from django.db import router, transaction
from django.db.models import F, FloatField, Value
from django.db.models.functions import Cast

from .. import clock
from ..conf import ratequeue_settings
from .algebra import State, project
from .config import RateLimitConfig
from .decisions import _phase
from .models import RateLimitState

BATCH_SIZE = 1000


def prune_full_rows(batch_size: int = BATCH_SIZE) -> int:
    """Delete up to ``batch_size`` full rows of each configured limit; return how many."""
    now = clock.timestamp()  # the consumes' clock: a host ahead must not find rows full
    return sum(
        _prune_limit(name, limit, now, batch_size)
        for name, limit in ratequeue_settings().RATE_LIMITS.items()
    )


def prune_all_full_rows(batch_size: int = BATCH_SIZE) -> int:
    """Delete every full row, in transactions of at most ``batch_size`` rows per limit."""
    total = 0
    while deleted := prune_full_rows(batch_size):
        total += deleted
    return total


def _prune_limit(name: str, limit: RateLimitConfig, now: float, batch_size: int) -> int:
    shares = [limit.per_shard(shard) for shard in range(limit.shard_count)]
    capacity = max(share.max_tokens for share in shares)
    seconds_per_token = max(share.period_seconds / share.rate for share in shares)
    # value + (now - period - ts) / seconds_per_token >= capacity, without overflow.
    refilled = (Value(now - limit.period_seconds) - F("ts")) / Value(seconds_per_token)
    surely_full = RateLimitState.objects.filter(
        name=name,
        shard__lt=limit.shard_count,
        value__gte=Cast(Value(capacity) - refilled, FloatField()),
    )
    with transaction.atomic(using=router.db_for_write(RateLimitState)):
        rows = surely_full.select_for_update(skip_locked=True).values_list(
            "pk", "key", "shard", "value", "ts"
        )[:batch_size]
        full = [
            pk
            for pk, key, shard, value, ts in rows
            if project(shares[shard], State(value, ts), now, _phase(name, key)).value
            >= shares[shard].max_tokens
        ]
        if full:
            RateLimitState.objects.filter(pk__in=full).delete()
    return len(full)

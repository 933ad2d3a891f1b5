"""Forgetting rate-limit rows that are full again: a missing row says as much.

The resting loop prunes a batch now and then (:func:`.queue.retention.prune_in_background`),
``manage.py ratelimits prune`` all of them; only limits in ``RATE_LIMITS`` with one
configuration for every key are pruned.
docs/concepts.md ("Two numbers per limit") tells which rows go, and how.
"""

from __future__ import annotations

from django.db import router, transaction
from django.db.models import F, FloatField, Value
from django.db.models.functions import Cast

from .. import clock
from ..conf import ratequeue_settings
from .algebra import State, project
from .config import KeyedConfig, RateLimitConfig
from .decisions import _phase
from .models import RateLimitState

BATCH_SIZE = 1000


def prune_full_rows(batch_size: int = BATCH_SIZE) -> int:
    """Delete up to ``batch_size`` full rows of each configured limit; return how many."""
    now = clock.timestamp()  # the consumes' clock: a host ahead must not find rows full
    # A keyed limit's rows are not pruned: their configs differ by key, so the cheap SQL
    # test has no capacity to compare with (docs/api.md, "Limits per tenant").
    return sum(
        _prune_limit(name, limit, now, batch_size)
        for name, limit in ratequeue_settings().RATE_LIMITS.items()
        if not isinstance(limit, KeyedConfig)
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

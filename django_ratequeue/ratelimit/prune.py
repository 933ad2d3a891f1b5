"""Forgetting rate-limit rows that are full again: a missing row says as much.

The resting loop prunes a batch now and then
(:func:`.plugins.retention.pruning.prune_in_background`), ``manage.py ratelimits prune``
all of them; only limits in ``RATE_LIMITS`` are pruned (a keyed limit's rows key by key,
each under its key's configuration).
docs/concepts.md ("Two numbers per limit") tells which rows go, and how.
"""

from __future__ import annotations

from django.db import router, transaction
from django.db.models import F, FloatField, Value
from django.db.models.functions import Cast

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.ratelimit.algebra import State, project
from django_ratequeue.ratelimit.config import KeyedConfig, RateLimitConfig
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.taking import phase

BATCH_SIZE = 1000


def prune_full_rows(batch_size: int = BATCH_SIZE) -> int:
    """Delete up to ``batch_size`` full rows of each configured limit; return how many.

    Of a keyed limit, the next ``batch_size`` rows by key are looked at (the walk goes on
    from there at the next call, and starts again after the last key)."""
    now = clock.timestamp()  # the consumes' clock: a host ahead must not find rows full
    total = 0
    for name, limit in ratequeue_settings().RATE_LIMITS.items():
        if isinstance(limit, KeyedConfig):
            deleted, _KEYED_AFTER[name] = _prune_keyed_page(
                name, limit, now, batch_size, _KEYED_AFTER.get(name)
            )
            total += deleted
        else:
            total += _prune_limit(name, limit, now, batch_size)
    return total


def prune_all_full_rows(batch_size: int = BATCH_SIZE) -> int:
    """Delete every full row, in transactions of at most ``batch_size`` rows per limit."""
    total = 0
    limits = ratequeue_settings().RATE_LIMITS.items()
    fixed = [(name, limit) for name, limit in limits if not isinstance(limit, KeyedConfig)]
    while deleted := sum(
        _prune_limit(name, limit, clock.timestamp(), batch_size) for name, limit in fixed
    ):
        total += deleted
    for name, limit in limits:
        if isinstance(limit, KeyedConfig):
            after: str | None = None
            while True:
                deleted, after = _prune_keyed_page(
                    name, limit, clock.timestamp(), batch_size, after
                )
                total += deleted
                if after is None:
                    break
    return total


# Where the background walk over each keyed limit's keys goes on: the last key looked at
# (None: from the first key). Kept by the process that prunes (the loop's leader).
_KEYED_AFTER: dict[str, str | None] = {}


def _prune_keyed_page(
    name: str, limit: KeyedConfig, now: float, batch_size: int, after: str | None
) -> tuple[int, str | None]:
    """Delete the full rows among the next ``batch_size`` rows of a keyed limit by key.

    Each key's config is asked before any row is locked (its function may be slow); the
    candidates are then locked, skipping rows a consumer holds, and confirmed. Return how
    many were deleted and the last key looked at (None once the last key was reached)."""
    page = RateLimitState.objects.filter(name=name).order_by("key", "shard")
    if after is not None:
        page = page.filter(key__gt=after)
    rows = list(page.values_list("pk", "key", "shard", "value", "ts")[:batch_size])
    configs: dict[str, RateLimitConfig | None] = {}
    for key in dict.fromkeys(row[1] for row in rows):
        try:
            configs[key] = limit.for_key(name, key or None)
        except ValueError:
            configs[key] = None  # its function fails: keep its rows
    candidates = [
        pk
        for pk, key, shard, value, ts in rows
        if _is_full(_share(configs[key], shard), State(value, ts), now, name, key)
    ]
    deleted = 0
    if candidates:
        with transaction.atomic(using=router.db_for_write(RateLimitState)):
            locked = RateLimitState.objects.filter(pk__in=candidates).select_for_update(
                skip_locked=True
            )
            full = [
                pk
                for pk, key, shard, value, ts in locked.values_list(
                    "pk", "key", "shard", "value", "ts"
                )
                if _is_full(_share(configs[key], shard), State(value, ts), now, name, key)
            ]
            if full:
                deleted = RateLimitState.objects.filter(pk__in=full).delete()[0]
    last = rows[-1][1] if len(rows) == batch_size else None
    return deleted, last


def _share(config: RateLimitConfig | None, shard: int) -> RateLimitConfig | None:
    """Return the configuration of row ``shard`` under ``config``, if it has that shard."""
    if config is None or shard >= config.shard_count:
        return None
    return config.per_shard(shard)


def _is_full(share: RateLimitConfig | None, state: State, now: float, name: str, key: str) -> bool:
    """Say whether a row holding ``state`` is full now under its ``share``."""
    if share is None:
        return False
    return project(share, state, now, phase(name, key)).value >= share.max_tokens


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
            if project(shares[shard], State(value, ts), now, phase(name, key)).value
            >= shares[shard].max_tokens
        ]
        if full:
            RateLimitState.objects.filter(pk__in=full).delete()
    return len(full)

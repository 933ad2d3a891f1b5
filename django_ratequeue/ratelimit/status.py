"""What a rate limit holds right now, for people and headers rather than for decisions.

The admin, the ``ratelimits`` command and the ``RateLimit-*`` response headers all show
stored rows projected to the present with the limit's configuration; this module does that
projection once, read-only, with the engine's own algebra. Decisions never come from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from django_ratequeue import clock
from django_ratequeue.ratelimit.algebra import State
from django_ratequeue.ratelimit.config import (
    FixedWindow,
    KeyedConfig,
    LimitConfig,
    RateLimitConfig,
)
from django_ratequeue.ratelimit.decisions import project_row_value, shard_states
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.resolve import configured_config, get_rate_limit_config

_PERIOD_NAMES = {1: "second", 60: "minute", 3600: "hour", 86400: "day", 604800: "week"}


def config_for(name: str, config: Any = None, key: str | None = None) -> RateLimitConfig | None:
    """Return the configuration of ``name`` for ``key``, or ``None`` if it cannot tell.

    The inline ``config`` if given, else the configured one; a keyed limit's is resolved
    for ``key`` (``None`` when its function fails: a page still shows the rest)."""
    if config is None:
        return configured_config(name, key)
    return get_rate_limit_config(name, config, key)


def describe(config: LimitConfig | None) -> str:
    """Describe ``config`` in words for lists and tables.

    For example ``"token bucket: 10 per hour, capacity 20"``; a keyed limit names its
    function."""
    if config is None:
        return "inline config (not in RATE_LIMITS)"
    if isinstance(config, KeyedConfig):
        shards = f", {config.shards} shards" if config.shards > 1 else ""
        return f"per key: {config.path}{shards}"
    period = config.period_seconds
    per = _PERIOD_NAMES.get(int(period)) if period.is_integer() else None
    text = f"{config.kind}: {config.rate:g} per {per or f'{period:g} s'}"
    if config.max_tokens != config.rate:
        text += f", capacity {config.max_tokens:g}"
    if config.max_reserved is not None:
        text += f", max reserved {config.max_reserved:g}"
    if config.shard_count > 1:
        text += f", {config.shard_count} shards"
    return text


def _seconds_until_full(share: RateLimitConfig, current: State, now: float) -> float:
    """Return how long until a shard holding ``current`` (projected to ``now``) is full again."""
    missing = share.max_tokens - current.value
    if missing <= 0:
        return 0.0
    if isinstance(share, FixedWindow):
        windows = math.ceil(missing / share.rate)
        return current.ts + windows * share.period_seconds - now
    return missing * share.period_seconds / share.rate


def quota_headers(name: str, *, key: str | None, config: Any = None) -> Mapping[str, str]:
    """Return the IETF draft ``RateLimit-*`` headers for the limit ``name`` and ``key``.

    ``Limit`` is the capacity, ``Remaining`` the whole tokens left over all shards,
    ``Reset`` the seconds (rounded up) until the limit is full again, and ``Policy`` the
    rate per window (``;burst=`` when the capacity differs from the rate).
    """
    limit = config_for(name, config, key)
    if limit is None:
        return {}
    now = clock.timestamp()
    states = shard_states(name, limit, key, now)
    remaining = sum(state.value for state in states.values())
    reset = max(
        _seconds_until_full(limit.per_shard(shard), state, now) for shard, state in states.items()
    )
    policy = f"{limit.rate:g};w={limit.period_seconds:g}"
    if limit.max_tokens != limit.rate:
        policy += f";burst={limit.max_tokens:g}"
    return {
        "RateLimit-Limit": f"{limit.max_tokens:g}",
        "RateLimit-Remaining": str(max(0, math.floor(remaining))),
        "RateLimit-Reset": str(math.ceil(reset)),
        "RateLimit-Policy": policy,
    }


@dataclass(frozen=True)
class KeysNow:
    """How many keys a limit has stored now, and how many of them are out of tokens.

    ``keys`` counts those of the first read (``capped`` when there are more);
    ``out_of_tokens`` those that cannot take one more token now (a user locked out, a
    client refused)."""

    keys: int
    out_of_tokens: int
    capped: bool


def _own_config(name: str, config: LimitConfig, key: str) -> RateLimitConfig | None:
    """Return ``key``'s configuration under ``config``; ``None`` if its function fails."""
    if not isinstance(config, KeyedConfig):
        return config
    try:
        return config.for_key(name, key or None)
    except ValueError:
        return None


def keys_now(name: str, config: LimitConfig, limit: int) -> KeysNow:
    """Count the keys of the limit ``name`` that have rows, and those out of tokens now.

    The first ``limit`` of them by key are read (one read of at most ``limit`` rows through
    the limit's unique index), each summed over its shards (a missing shard is a full
    share) and projected to now, under its own configuration for a keyed limit (a key
    whose function fails is counted, not judged)."""
    rows = list(
        RateLimitState.objects.filter(name=name)
        .exclude(key="")
        .order_by("key", "shard")
        .only("name", "key", "shard", "value", "ts")[: limit + 1]
    )
    capped = len(rows) > limit
    if capped:  # the last key may have more shards than were read: leave it out
        last = rows[limit].key
        rows = [row for row in rows[:limit] if row.key != last]
    now = clock.timestamp()
    keys = out = 0
    for key, shards in groupby(rows, key=lambda row: row.key):
        keys += 1
        own = _own_config(name, config, key)
        if own is None:
            continue
        stored = {row.shard: project_row_value(row, own, now) for row in shards}
        value = 0.0
        for shard in range(own.shard_count):
            held = stored.get(shard)
            value += own.per_shard(shard).max_tokens if held is None else held
        out += value < 1
    return KeysNow(keys, out, capped)

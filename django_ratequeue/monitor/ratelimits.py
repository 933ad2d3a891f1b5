"""Read how much of each configured rate limit is in use now, for the admin's dashboard."""

from __future__ import annotations

from dataclasses import dataclass

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.ratelimit.config import KeyedConfig, RateLimitConfig
from django_ratequeue.ratelimit.decisions import project_row_value
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.resolve import configured_config
from django_ratequeue.ratelimit.status import KeysNow, describe, keys_now

# The keys of a rate limit read at most (its rows with a key, projected to now).
KEYS_READ = 1_000


@dataclass(frozen=True)
class RateLimitUse:
    """A configured rate limit now: its value without a key against its capacity, and its keys.

    The value without a key is the one rate-gated queues draw from (below zero: tokens
    reserved ahead), meaningful when ``without_key`` (something draws on it without a
    key)."""

    name: str
    text: str
    value: float
    capacity: float
    without_key: bool
    keys: KeysNow
    queues: tuple[str, ...]
    # A keyed limit (plan tiers): value and capacity are those without a key (0 when
    # nothing drew on it without a key, or its function gives no config for None); each
    # key has its own.
    keyed: bool = False

    @property
    def used(self) -> float:
        """Return the share of the capacity in use, 0 to 1 (1 also when reserved ahead)."""
        if self.capacity <= 0:
            return 0.0
        return min(1.0, max(0.0, (self.capacity - self.value) / self.capacity))

    @property
    def exhausted(self) -> bool:
        """Say whether not one whole token is left: what is drawn now waits (or is refused)."""
        return self.value < 1

    @property
    def reserved(self) -> float:
        """Return the tokens reserved ahead (0 when none are)."""
        return max(0.0, -self.value)


def rate_limit_uses(gated: dict[str, list[str]]) -> list[RateLimitUse]:
    """Return each configured limit's value without a key now and its keys.

    ``gated`` names, per limit, the queues it gates. The rows without a key of every
    limit are read at once (a missing shard is full); the keys, the first KEYS_READ.
    """
    configured = ratequeue_settings().RATE_LIMITS
    rows: dict[str, list[RateLimitState]] = {}
    for row in RateLimitState.objects.filter(name__in=list(configured), key=""):
        rows.setdefault(row.name, []).append(row)
    now = clock.timestamp()
    uses = []
    for name, limit in sorted(configured.items()):
        stored = {row.shard: row for row in rows.get(name, [])}
        config: RateLimitConfig | None = limit if not isinstance(limit, KeyedConfig) else None
        if isinstance(limit, KeyedConfig) and stored:
            # Asked for no key only when a consume without a key made rows: a plan function
            # need not answer for None, and the live page renders every few seconds.
            config = configured_config(name)
        queues = tuple(gated.get(name, ()))
        value = capacity = 0.0
        if config is not None:
            value = _value_without_key(config, stored, now)
            capacity = config.max_tokens
        uses.append(
            RateLimitUse(
                name,
                describe(limit),
                value,
                capacity,
                config is not None and bool(stored or queues),
                keys_now(name, limit, KEYS_READ),
                queues,
                keyed=isinstance(limit, KeyedConfig),
            )
        )
    return uses


def _value_without_key(
    config: RateLimitConfig, stored: dict[int, RateLimitState], now: float
) -> float:
    """Return the tokens of the limit without a key now, summed over shards."""
    return sum(
        project_row_value(stored[shard], config, now) or 0.0
        if shard in stored
        else config.per_shard(shard).max_tokens
        for shard in range(config.shard_count)
    )

"""The rate limiters under comparison, each reduced to one call: "may this go ahead?".

Every contender enforces "``limit`` per hour" on one key, with its own defaults. Imports
happen inside the builders: a contender whose package is missing fails alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Decider = Callable[[], bool]

HOUR = 3600
LIMITS_STRATEGIES = ("moving-window", "fixed-window", "sliding-window-counter")


@dataclass(frozen=True)
class Contender:
    label: str
    build: Callable[[str, int, int], Decider]  # (key, limit per hour, shards) -> decider


def ours(key: str, limit: int, shards: int) -> Decider:
    """django-ratequeue: a token bucket row (or ``shards`` rows) locked in PostgreSQL."""
    from django_ratequeue import TokenBucket, rate_limit

    config = TokenBucket(limit, HOUR, shards=shards)
    return lambda: rate_limit("bench", key=key, config=config).ok


def drf_throttle(key: str, limit: int, shards: int) -> Decider:
    """DRF's SimpleRateThrottle: a list of timestamps read from and written back to the cache."""
    from rest_framework.throttling import SimpleRateThrottle

    class KeyThrottle(SimpleRateThrottle):
        rate = f"{limit}/hour"

        def get_cache_key(self, request: object, view: object) -> str:
            return f"throttle_bench_{key}"

    throttle = KeyThrottle()
    return lambda: throttle.allow_request(None, None)


def django_ratelimit(key: str, limit: int, shards: int) -> Decider:
    """django-ratelimit: a fixed-window counter kept with cache ``add`` then ``incr``."""
    from django.test import RequestFactory
    from django_ratelimit.core import is_ratelimited

    request = RequestFactory().get("/")

    def decide() -> bool:
        return not is_ratelimited(
            request,
            group="bench",
            key=lambda group, request: key,
            rate=f"{limit}/h",
            increment=True,
        )

    return decide


def limits_builder(strategy_name: str) -> Callable[[str, int, int], Decider]:
    """``limits`` on its Redis storage with the named strategy (Lua scripts run in Redis)."""

    def build(key: str, limit: int, shards: int) -> Decider:
        from django.conf import settings
        from limits import RateLimitItemPerHour, storage, strategies

        strategy = strategies.STRATEGIES[strategy_name]
        limiter = strategy(storage.RedisStorage(settings.REDIS_URL))
        item = RateLimitItemPerHour(limit)
        return lambda: limiter.hit(item, "bench", key)

    return build


def naive_orm(key: str, limit: int, shards: int) -> Decider:
    """One row per key, locked with select_for_update, read, incremented and saved."""
    from django.db import transaction

    from bench.models import NaiveCounter

    def decide() -> bool:
        window = int(time.time() // HOUR)
        with transaction.atomic():
            counter, _ = NaiveCounter.objects.select_for_update().get_or_create(key=key)
            if counter.window != window:
                counter.window, counter.count = window, 0
            if counter.count >= limit:
                return False
            counter.count += 1
            counter.save(update_fields=["window", "count"])
            return True

    return decide


CONTENDERS: dict[str, Contender] = {
    "ours": Contender("ours (PostgreSQL)", ours),
    "drf": Contender("DRF throttle (Redis cache)", drf_throttle),
    "django-ratelimit": Contender("django-ratelimit (Redis cache)", django_ratelimit),
    **{
        f"limits-{strategy}": Contender(f"limits {strategy} (Redis)", limits_builder(strategy))
        for strategy in LIMITS_STRATEGIES
    },
    "naive-orm": Contender("naive ORM select_for_update (PostgreSQL)", naive_orm),
}


def build_decider(contender: str, key: str, limit: int, shards: int = 1) -> Decider:
    return CONTENDERS[contender].build(key, limit, shards)

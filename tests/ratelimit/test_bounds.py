"""Hostile numbers for rate limits: refused with a ValueError, and nothing written."""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_ratequeue import (
    FixedWindow,
    TokenBucket,
    check_rate_limit,
    clock,
    define_rate_limits,
    get_rate_limit_value,
    rate_limit,
)
from django_ratequeue.models import RateLimitState
from django_ratequeue.ratelimit.config import parse_config

INF, NAN = math.inf, math.nan
LIMIT = TokenBucket(rate=10, period=60)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reserve", [False, True])
@pytest.mark.parametrize(
    ("count", "message"),
    [
        (INF, "count must be at most 1e\\+15"),
        (NAN, "count must be a positive number"),
        (1e308, "count must be at most"),
        pytest.param(10**400, "count must be at most", id="10**400"),
        (sys.maxsize, "count must be at most"),
        (-1, "count must be a positive number"),
        (-INF, "count must be a positive number"),
        (0, "count must be a positive number"),
        ("1", "count must be a positive number"),
        (None, "count must be a positive number"),
        (True, "count must be a positive number"),
    ],
)
def test_hostile_counts_are_refused_and_write_nothing(
    count: Any, message: str, reserve: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for call in (rate_limit, check_rate_limit):
        with pytest.raises(ValueError, match=message):
            call("api", key="k", count=count, reserve=reserve, config=LIMIT)
    limits = define_rate_limits({"api": LIMIT})
    with pytest.raises(ValueError, match=message):
        limits.rate_limit("api", key="k", count=count, reserve=reserve)
    assert not RateLimitState.objects.exists()
    # The key is not poisoned: it admits as a fresh one does (read at the instant it admitted,
    # so that a slow machine's refill in between is not counted).
    now = clock.timestamp()
    monkeypatch.setattr(clock, "timestamp", lambda: now)
    assert rate_limit("api", key="k", count=1, config=LIMIT).ok
    assert get_rate_limit_value("api", key="k", config=LIMIT) == pytest.approx(9, abs=0.01)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rate": INF}, "rate must be a finite number"),
        ({"rate": NAN}, "rate must be a finite number"),
        ({"rate": 1e308}, "rate must be at most 1e\\+15"),
        ({"period": INF}, "period must be from 0.001 to"),
        ({"period": NAN}, "period must be longer than 0"),
        ({"period": 1e308}, "period must be from"),
        ({"period": 1e-9}, "period must be from"),
        ({"period": timedelta(days=3651)}, "period must be from"),
        ({"capacity": INF}, "capacity must be a finite number"),
        ({"capacity": NAN}, "capacity must be a finite number"),
        ({"capacity": 1e308}, "capacity must be at most"),
        ({"max_reserved": INF}, "max_reserved must be a finite number"),
        ({"max_reserved": 1e308}, "max_reserved must be at most"),
        ({"shards": 10**9}, "shards must be an integer from 1 to 1024"),
        pytest.param({"rate": 10**400}, "rate must be a finite number", id="rate=10**400"),
        pytest.param({"period": 10**400}, "period must be from", id="period=10**400"),
        pytest.param({"capacity": -(10**400)}, "capacity must be a finite", id="capacity"),
    ],
)
@pytest.mark.parametrize("kind", [TokenBucket, FixedWindow])
def test_hostile_configs_are_refused(kind: Any, fields: dict[str, Any], message: str) -> None:
    values = {"rate": 10, "period": 60, **fields}
    with pytest.raises(ValueError, match=message):
        kind(**values)
    with pytest.raises(ValueError, match=message):
        parse_config({"kind": kind.kind, **values})


@pytest.mark.parametrize("start", [INF, NAN, 1e308, -1e308, 10**400])
def test_a_fixed_window_starts_at_a_finite_time(start: float) -> None:
    with pytest.raises(ValueError, match=r"FixedWindow\.start must be"):
        FixedWindow(rate=10, period=60, start=start)
    FixedWindow(rate=10, period=60, start=datetime(1, 1, 2, tzinfo=UTC))


@pytest.mark.django_db(transaction=True)
def test_a_reservation_decades_ahead_answers_a_time_it_can_represent() -> None:
    """The largest count, reserved from the slowest limit: its run time is beyond the
    year 9999, so the answer names the latest time it can, rather than fail after writing."""
    slow = TokenBucket(rate=1, period=timedelta(days=3650))
    decision = rate_limit("slow", count=1e15, reserve=True, config=slow)
    assert decision.ok and decision.retry_at is not None and decision.retry_at.year >= 9998
    again = check_rate_limit("slow", count=1, reserve=True, config=slow)
    assert again.ok and again.retry_at is not None and again.retry_at.year >= 9998
    assert not check_rate_limit("slow", count=1, config=slow).ok

"""Rows that are full again are equal to a missing row: pruned in the background and by
``manage.py ratelimits prune``, and nothing else is."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.test import override_settings

from django_ratequeue import TokenBucket, clock, get_rate_limit_value, rate_limit
from django_ratequeue.plugins.retention import pruning as retention
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.prune import prune_all_full_rows, prune_full_rows

pytestmark = pytest.mark.django_db

LIMITS = {
    "per_ip": {"kind": "token bucket", "rate": 10, "period": 60, "capacity": 20},
    "windowed": {"kind": "fixed window", "rate": 5, "period": 60},
    "sharded": {"kind": "token bucket", "rate": 8, "period": 60, "shards": 4},
    "reserving": {"kind": "token bucket", "rate": 10, "period": 60, "max_reserved": 100},
}
INLINE = TokenBucket(rate=1, period=60)


def consume(name: str, key: str, count: float, *, aged: float, reserve: bool = False) -> None:
    """Consume, then move the row's time back by ``aged`` seconds: as if consumed then."""
    config = INLINE if name == "inline" else None
    assert rate_limit(name, key=key, count=count, reserve=reserve, config=config).ok
    RateLimitState.objects.filter(name=name, key=key).update(ts=F("ts") - aged)


def stored() -> set[tuple[str, str]]:
    return set(RateLimitState.objects.values_list("name", "key"))


def value(name: str, key: str) -> float:
    return get_rate_limit_value(name, key=key, config=INLINE if name == "inline" else None)


@pytest.fixture
def rows() -> Iterator[None]:
    with override_settings(RATEQUEUE={"RATE_LIMITS": LIMITS}):
        consume("per_ip", "full-again", 1, aged=3600)
        consume("per_ip", "refilling", 15, aged=30)  # 5 + 5 of 20
        consume("per_ip", "just-used", 1, aged=0)
        consume("windowed", "full-again", 5, aged=120)  # two windows later
        consume("windowed", "used-this-window", 1, aged=0)
        consume("reserving", "paying-back", 50, aged=60, reserve=True)  # -40 + 10
        consume("reserving", "paid-back", 50, aged=3600, reserve=True)
        for _ in range(4):
            consume("sharded", "full-again", 1, aged=0)
        RateLimitState.objects.filter(name="sharded").update(ts=F("ts") - 3600)
        consume("inline", "unknown-config", 1, aged=3600)
        yield


@override_settings(RATEQUEUE={"RATE_LIMITS": LIMITS})
def test_only_rows_back_at_capacity_are_pruned_and_every_value_stays(
    rows: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every value is read at one instant, so that the rows refilling while a loaded machine
    # runs the test cannot be taken for a value the pruning changed.
    now = clock.timestamp()
    monkeypatch.setattr(clock, "timestamp", lambda: now)
    before = {row: value(*row) for row in stored()}
    assert RateLimitState.objects.filter(name="sharded").count() > 1

    full = RateLimitState.objects.count() - 5
    assert prune_all_full_rows() == full
    assert stored() == {
        ("per_ip", "refilling"),
        ("per_ip", "just-used"),
        ("windowed", "used-this-window"),
        ("reserving", "paying-back"),
        ("inline", "unknown-config"),
    }
    after = {row: value(*row) for row in before}
    assert after == pytest.approx(before, abs=0.01)
    assert prune_full_rows() == 0


@override_settings(RATEQUEUE={"RATE_LIMITS": LIMITS})
def test_the_resting_loop_prunes_in_the_background(rows: None, monkeypatch) -> None:
    monkeypatch.setattr(retention, "_next_background_prune", 0.0)

    retention.prune_in_background()

    assert ("per_ip", "full-again") not in stored()
    assert ("per_ip", "just-used") in stored()


@override_settings(RATEQUEUE={"RATE_LIMITS": LIMITS})
def test_the_command_prunes_them(rows: None) -> None:
    full = RateLimitState.objects.count() - 5
    out = StringIO()

    call_command("ratelimits", "prune", "--batch-size", "1", stdout=out)

    assert out.getvalue().startswith(f"Pruned {full} full rate-limit rows")
    assert len(stored()) == 5
    with pytest.raises(CommandError, match="--batch-size must be at least 1"):
        call_command("ratelimits", "prune", "--batch-size", "0")

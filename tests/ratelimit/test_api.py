"""The public rate-limit functions against the real database (PostgreSQL or SQLite)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.test import override_settings

from django_ratequeue import (
    FixedWindow,
    RateLimited,
    RateLimitResult,
    TokenBucket,
    check_rate_limit,
    define_rate_limits,
    get_rate_limit_value,
    rate_limit,
    reset_rate_limit,
)
from django_ratequeue.ratelimit.decisions import jittered_retry_at, project_row_value
from django_ratequeue.ratelimit.models import RateLimitState

pytestmark = pytest.mark.django_db

HOURLY = TokenBucket(rate=3, period=timedelta(hours=1))


def rows() -> list[tuple[str, str, int, float, float]]:
    return list(
        RateLimitState.objects.order_by("name", "key", "shard").values_list(
            "name", "key", "shard", "value", "ts"
        )
    )


def test_token_bucket_admits_its_capacity_then_says_when_to_retry() -> None:
    before = time.time()
    results = [rate_limit("signup", config=HOURLY) for _ in range(4)]
    assert [r.ok for r in results] == [True, True, True, False]
    assert results[0] == RateLimitResult(ok=True, value=3.0)
    refused = results[-1]
    # One token refills every 20 minutes.
    assert refused.retry_after == pytest.approx(1200, abs=2)
    assert refused.retry_at is not None and refused.retry_at.tzinfo is not None
    assert refused.retry_at.timestamp() == pytest.approx(before + 1200, abs=2)


def test_a_refusal_writes_nothing() -> None:
    for _ in range(3):
        rate_limit("signup", config=HOURLY)
    stored = rows()
    assert not rate_limit("signup", config=HOURLY).ok
    assert rows() == stored


def test_a_count_that_can_never_fit_is_an_error_and_writes_nothing() -> None:
    with pytest.raises(ValueError, match=r"count 4 can never fit.*capacity 3.*reserve=True"):
        rate_limit("signup", count=4, config=HOURLY)
    limited = TokenBucket(3, 3600, max_reserved=2)
    with pytest.raises(ValueError, match=r"count 6 can never fit.*capacity 3 plus max_reserved 2"):
        rate_limit("signup", count=6, reserve=True, config=limited)
    sharded = TokenBucket(8, 3600, shards=4)
    with pytest.raises(ValueError, match=r"at most 2 tokens per shard \(4 shards\)"):
        rate_limit("signup", count=3, config=sharded)
    assert rows() == []


@pytest.mark.parametrize("count", [0, -1, 1.5j, "1", True, None, float("nan")])
def test_count_must_be_a_positive_number(count: object) -> None:
    with pytest.raises(ValueError, match="count must be a positive number"):
        rate_limit("signup", count=count, config=HOURLY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be a positive number"):
        check_rate_limit("signup", count=count, config=HOURLY)  # type: ignore[arg-type]
    assert rows() == []


def test_keys_are_limited_apart() -> None:
    assert [rate_limit("msg", key="ann", count=3, config=HOURLY).ok for _ in range(2)] == [
        True,
        False,
    ]
    assert rate_limit("msg", key="bob", count=3, config=HOURLY).ok
    assert rate_limit("msg", count=3, config=HOURLY).ok
    assert {(name, key) for name, key, *_ in rows()} == {
        ("msg", "ann"),
        ("msg", "bob"),
        ("msg", ""),
    }


def test_bad_names_and_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        rate_limit("", config=HOURLY)
    with pytest.raises(ValueError, match="key must be a string or None, got 42"):
        rate_limit("a", key=42, config=HOURLY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hash long keys"):
        rate_limit("a", key="k" * 256, config=HOURLY)
    assert rows() == []


def test_check_consumes_nothing_and_reports_the_value() -> None:
    rate_limit("signup", count=2, config=HOURLY)
    stored = rows()
    checked = check_rate_limit("signup", config=HOURLY)
    assert checked.ok and checked.value == pytest.approx(1, abs=0.01)
    refused = check_rate_limit("signup", count=2, config=HOURLY)
    assert not refused.ok and refused.retry_after == pytest.approx(1200, abs=2)
    assert rows() == stored
    assert check_rate_limit("never-used", config=HOURLY) == RateLimitResult(True, value=3.0)
    assert rows() == stored


def test_reset_restores_the_whole_limit_for_one_key() -> None:
    rate_limit("login", key="ann", count=3, config=HOURLY)
    rate_limit("login", key="bob", count=3, config=HOURLY)
    reset_rate_limit("login", key="ann")
    assert get_rate_limit_value("login", key="ann", config=HOURLY) == 3
    assert get_rate_limit_value("login", key="bob", config=HOURLY) == pytest.approx(0, abs=0.01)


def test_reset_of_all_keys_restores_every_key_of_that_limit_only() -> None:
    for key in ("ann", "bob"):
        rate_limit("login", key=key, count=3, config=HOURLY)
    rate_limit("signup", key="ann", count=3, config=HOURLY)
    reset_rate_limit("login", all_keys=True)
    assert get_rate_limit_value("login", key="ann", config=HOURLY) == 3
    assert get_rate_limit_value("login", key="bob", config=HOURLY) == 3
    assert get_rate_limit_value("signup", key="ann", config=HOURLY) < 1
    with pytest.raises(ValueError, match="either key= or all_keys=True"):
        reset_rate_limit("signup", key="ann", all_keys=True)
    assert get_rate_limit_value("signup", key="ann", config=HOURLY) < 1


def test_throws_raises_rate_limited_with_name_key_and_retry_time() -> None:
    rate_limit("login", key="ann", count=3, config=HOURLY)
    with pytest.raises(RateLimited) as raised:
        rate_limit("login", key="ann", throws=True, config=HOURLY)
    assert (raised.value.name, raised.value.key) == ("login", "ann")
    assert raised.value.retry_at is not None
    assert raised.value.retry_at > datetime.now(UTC) + timedelta(minutes=19)
    with pytest.raises(RateLimited):
        check_rate_limit("login", key="ann", throws=True, config=HOURLY)
    assert rate_limit("login", key="bob", throws=True, config=HOURLY).ok


def test_reserve_borrows_from_the_future_and_says_when_to_run() -> None:
    limit = TokenBucket(rate=10, period=60, max_reserved=10)  # a token every 6 s
    assert rate_limit("llm", count=8, config=limit).ok
    reserved = rate_limit("llm", count=5, reserve=True, config=limit)
    assert reserved.ok
    assert reserved.retry_after == pytest.approx(18, abs=1)  # 3 tokens short
    assert get_rate_limit_value("llm", config=limit) == pytest.approx(-3, abs=0.1)
    too_many = rate_limit("llm", count=8, reserve=True, config=limit)
    assert not too_many.ok  # -11 would exceed max_reserved
    assert too_many.retry_after == pytest.approx(6, abs=1)
    assert not rate_limit("llm", config=limit).ok  # plain consumes wait for the debt


def test_fixed_window_refills_at_the_start_of_the_next_window() -> None:
    start = datetime.now(UTC) - timedelta(seconds=10)
    window = FixedWindow(rate=2, period=timedelta(hours=1), start=start)
    assert [rate_limit("api", config=window).ok for _ in range(3)] == [True, True, False]
    refused = rate_limit("api", config=window)
    assert refused.retry_at is not None
    assert refused.retry_at.timestamp() == pytest.approx(start.timestamp() + 3600, abs=1e-5)


def test_fixed_window_without_start_has_a_stable_phase_per_key() -> None:
    window = FixedWindow(rate=1, period=3600)
    rate_limit("api", key="a", config=window)
    first = check_rate_limit("api", key="a", config=window).retry_at
    assert first == rate_limit("api", key="a", config=window).retry_at
    rate_limit("api", key="b", config=window)
    assert check_rate_limit("api", key="b", config=window).retry_at != first


def test_shards_admit_exactly_the_total_capacity() -> None:
    limit = TokenBucket(rate=40, period=timedelta(days=1), shards=4)
    admitted = sum(rate_limit("hot", config=limit).ok for _ in range(80))
    assert admitted == 40
    assert sorted(shard for _, _, shard, *_ in rows()) == [0, 1, 2, 3]
    assert get_rate_limit_value("hot", config=limit) == pytest.approx(0, abs=0.01)
    assert not check_rate_limit("hot", config=limit).ok
    reset_rate_limit("hot")
    assert rows() == []
    assert check_rate_limit("hot", config=limit) == RateLimitResult(True, value=40.0)


def test_shards_split_a_whole_capacity_into_whole_shares() -> None:
    limit = FixedWindow(rate=100, period=timedelta(days=1), shards=8, max_reserved=8)
    shares = [limit.per_shard(shard) for shard in range(8)]
    assert sorted({share.max_tokens for share in shares}) == [12, 13]
    assert sum(share.max_tokens for share in shares) == 100
    assert sum(share.rate for share in shares) == pytest.approx(100)
    assert sum(share.max_reserved or 0 for share in shares) == pytest.approx(8)
    admitted = sum(rate_limit("hot", config=limit).ok for _ in range(150))
    assert admitted == 100


def test_limits_consumed_in_one_atomic_block_roll_back_together() -> None:
    with pytest.raises(RateLimited), transaction.atomic():
        assert rate_limit("per-user", key="ann", count=3, config=HOURLY).ok
        assert rate_limit("global", count=3, config=HOURLY).ok
        rate_limit("global", config=HOURLY, throws=True)
    assert rows() == []
    with transaction.atomic():
        rate_limit("per-user", key="ann", count=3, config=HOURLY)
        rate_limit("global", count=3, config=HOURLY)
    assert [name for name, *_ in rows()] == ["global", "per-user"]


def test_a_refusal_caught_inside_an_atomic_block_leaves_it_usable() -> None:
    rate_limit("login", count=3, config=HOURLY)
    with transaction.atomic():
        with pytest.raises(RateLimited):
            rate_limit("login", throws=True, config=HOURLY)
        assert rate_limit("other", config=HOURLY).ok
    assert [name for name, *_ in rows()] == ["login", "other"]


@override_settings(
    RATEQUEUE={
        "RATE_LIMITS": {
            "failed_logins": {"kind": "token bucket", "rate": 10, "period": 3600},
            "third_party": {"kind": "fixed window", "rate": 100, "period": 60, "start": 0},
        }
    }
)
def test_limits_come_from_settings_by_name() -> None:
    assert rate_limit("failed_logins", key="ann", count=10).ok
    assert not rate_limit("failed_logins", key="ann").ok
    assert check_rate_limit("third_party").value == 100
    assert get_rate_limit_value("failed_logins", key="ann") == pytest.approx(0, abs=0.01)
    with pytest.raises(ValueError) as raised:
        rate_limit("failed_login")
    message = str(raised.value)
    assert "Unknown rate limit 'failed_login'" in message
    assert 'settings.RATEQUEUE["RATE_LIMITS"]' in message
    assert "'failed_logins', 'third_party'" in message


@override_settings(RATEQUEUE={})
def test_an_unknown_name_without_settings_says_how_to_configure() -> None:
    with pytest.raises(ValueError, match=r"pass config=TokenBucket\(...\).*configured: none"):
        rate_limit("nothing")
    with pytest.raises(ValueError, match="Unknown rate limit"):
        check_rate_limit("nothing")
    with pytest.raises(ValueError, match="Unknown rate limit"):
        get_rate_limit_value("nothing")


def test_inline_dict_config() -> None:
    config = {"kind": "fixed window", "rate": 2, "period": 60, "start": 0}
    assert rate_limit("dict", count=2, config=config).ok
    assert not rate_limit("dict", config=config).ok


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"kind": "leaky bucket", "rate": 1, "period": 1},
            "Unknown rate-limit kind 'leaky bucket'",
        ),
        ({"rate": 1, "period": 1}, "Unknown rate-limit kind None"),
        ({"kind": "token bucket", "rate": 1}, "needs period"),
        ({"kind": "token bucket", "rate": 1, "period": 1, "burst": 3}, "Unknown key(s) 'burst'"),
        ({"kind": "token bucket", "rate": 1, "period": 1, "start": 0}, "Unknown key(s) 'start'"),
        ({"kind": "token bucket", "rate": 0, "period": 1}, "rate must be greater than 0"),
        ({"kind": "token bucket", "rate": "5", "period": 1}, "rate must be a finite number"),
        ({"kind": "fixed window", "rate": 1, "period": -1}, "period must be longer than 0"),
        (
            {"kind": "fixed window", "rate": 1, "period": "1h"},
            "period must be a number of seconds",
        ),
        ({"kind": "token bucket", "rate": 1, "period": 1, "capacity": -1}, "capacity must be 0"),
        (
            {"kind": "token bucket", "rate": 1, "period": 1, "max_reserved": -1},
            "max_reserved must",
        ),
        (
            {"kind": "token bucket", "rate": 1, "period": 1, "shards": 0},
            "shards must be an integer",
        ),
        ({"kind": "fixed window", "rate": 1, "period": 1, "start": datetime(2026, 1, 1)}, "aware"),
        ("token bucket", "must be a TokenBucket, a FixedWindow or a dict"),
    ],
)
def test_bad_configs_are_explained(config: object, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        rate_limit("bad", config=config)  # type: ignore[arg-type]
    assert message in str(raised.value)
    assert rows() == []


def test_defined_limits_accept_only_their_names() -> None:
    limits = define_rate_limits(
        {
            "create_thing": {"kind": "token bucket", "rate": 3, "period": 3600},
            "third_party": FixedWindow(rate=100, period=60),
        }
    )
    assert "create_thing" in limits and "other" not in limits
    assert limits.rate_limit("create_thing", key="ann", count=3).ok
    assert not limits.check_rate_limit("create_thing", key="ann").ok
    assert limits.get_rate_limit_value("create_thing", key="ann") == pytest.approx(0, abs=0.01)
    limits.reset_rate_limit("create_thing", key="ann")
    assert limits.check_rate_limit("create_thing", key="ann").value == 3
    for method in (limits.rate_limit, limits.check_rate_limit, limits.reset_rate_limit):
        with pytest.raises(ValueError, match="'create_thng' is not one of the defined limits"):
            method("create_thng")
    with pytest.raises(ValueError, match="Rate limit 'x': Unknown rate-limit kind 'y'"):
        define_rate_limits({"x": {"kind": "y"}})


def test_project_row_value_for_the_admin() -> None:
    rate_limit("signup", count=3, config=HOURLY)
    row = RateLimitState.objects.get()
    assert project_row_value(row, HOURLY, now=row.ts + 600) == pytest.approx(0.5)
    with override_settings(RATEQUEUE={}):
        assert project_row_value(row) is None  # not in settings
    with override_settings(
        RATEQUEUE={"RATE_LIMITS": {"signup": {"kind": "token bucket", "rate": 3, "period": 3600}}}
    ):
        assert project_row_value(row, now=row.ts + 7200) == 3


def test_jittered_retry_at_stays_within_one_period() -> None:
    retry_at = datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(20):
        jittered = jittered_retry_at(retry_at, timedelta(minutes=1))
        assert retry_at <= jittered < retry_at + timedelta(minutes=1, microseconds=1)

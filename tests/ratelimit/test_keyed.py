"""Keyed rate limits (plan tiers): a limit whose configuration a function of the key gives.

Against the real database (PostgreSQL or SQLite), with the clock stopped and moved by
hand: a plan change applies to the next decision, a keyed limit decides exactly as the
same configuration given inline for that key, and bad functions fail clearly.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratequeue import (
    FixedWindow,
    TokenBucket,
    check_rate_limit,
    define_rate_limits,
    get_rate_limit_value,
    rate_limit,
    reset_rate_limit,
)
from django_ratequeue.ratelimit.algebra import State, project
from django_ratequeue.ratelimit.config import KeyedConfig, parse_limit
from django_ratequeue.ratelimit.decisions import project_row_value
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.resolve import get_rate_limit_config
from tests.queue.steps import Clock, freeze
from tests.ratelimit import plans

pytestmark = pytest.mark.django_db

PER_PLAN = {"llm": {"per_key": "tests.ratelimit.plans.plan_limit"}}


@pytest.fixture(autouse=True)
def no_plans() -> Iterator[None]:
    plans.PLANS.clear()
    plans.CALLS.clear()
    yield
    plans.PLANS.clear()


@pytest.fixture
def moved(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


def oks(times: int, key: str, count: float = 1) -> list[bool]:
    return [rate_limit("llm", key=key, count=count).ok for _ in range(times)]


@override_settings(RATEQUEUE={"RATE_LIMITS": PER_PLAN})
def test_each_key_gets_its_plans_limit() -> None:
    plans.PLANS.update({"acme": "pro"})
    assert oks(3, "tiny") == [True, True, False]  # free: 2 an hour
    assert oks(21, "acme") == [True] * 20 + [False]  # pro: capacity 20
    assert get_rate_limit_value("llm", key="tiny") == pytest.approx(0, abs=0.01)
    assert plans.CALLS[:3] == ["tiny"] * 3  # asked at each decision, with the key


@override_settings(RATEQUEUE={"RATE_LIMITS": PER_PLAN})
def test_an_upgrade_applies_at_the_next_decision(moved: Clock) -> None:
    assert oks(3, "acme") == [True, True, False]
    moved.advance(360)  # free refills 0.2 token in 6 minutes: still refused
    assert oks(1, "acme") == [False]
    plans.PLANS["acme"] = "pro"  # pro refills 1 token per 6 minutes, from the stored state
    assert check_rate_limit("llm", key="acme").ok
    assert oks(2, "acme") == [True, False]
    moved.advance(3600)
    assert get_rate_limit_value("llm", key="acme") == pytest.approx(10)


@override_settings(RATEQUEUE={"RATE_LIMITS": PER_PLAN})
def test_a_downgrade_cuts_the_stored_tokens_to_the_new_capacity_at_once(moved: Clock) -> None:
    plans.PLANS["acme"] = "pro"
    assert oks(1, "acme") == [True]  # 19 of 20 left, stored at this very instant
    plans.PLANS["acme"] = "free"
    assert get_rate_limit_value("llm", key="acme") == 2
    assert oks(3, "acme") == [True, True, False]


def test_a_fixed_windows_downgrade_holds_within_the_window(moved: Clock) -> None:
    """A fixed window's stored value is not refilled within its window; a downgrade still
    caps it at once."""
    tiers = {"big": FixedWindow(100, 3600, start=0), "small": FixedWindow(3, 3600, start=0)}
    plan = {"t": "big"}
    limit = KeyedConfig(lambda key: tiers[plan[key or ""]])
    assert rate_limit("quota", key="t", config=limit).ok
    plan["t"] = "small"
    results = [rate_limit("quota", key="t", config=limit).ok for _ in range(4)]
    assert results == [True, True, True, False]


@override_settings(RATEQUEUE={"RATE_LIMITS": PER_PLAN})
def test_reservations_carry_their_debt_into_the_new_plan(moved: Clock) -> None:
    plans.PLANS["acme"] = "metered"  # 100 a minute, up to 1000 reserved ahead
    assert rate_limit("llm", key="acme", count=600, reserve=True).ok  # 500 in debt
    plans.PLANS["acme"] = "reserving"  # max_reserved 1: the debt is still owed
    refused = rate_limit("llm", key="acme", reserve=True)
    assert not refused.ok
    assert get_rate_limit_value("llm", key="acme") == pytest.approx(-500)


def test_an_inline_keyed_config_and_a_defined_one_are_resolved_per_key() -> None:
    limit = KeyedConfig(lambda key: TokenBucket(1 if key == "a" else 2, 60))
    assert [rate_limit("inline", key="a", config=limit).ok for _ in range(2)] == [True, False]
    assert [rate_limit("inline", key="b", config=limit).ok for _ in range(3)] == [
        True,
        True,
        False,
    ]
    defined = define_rate_limits({"plans": {"per_key": "tests.ratelimit.plans.plan_limit"}})
    plans.PLANS["x"] = "pro"
    assert defined.get_rate_limit_value("plans", key="x") == 20
    assert defined.get_rate_limit_value("plans", key="y") == 2


# --- a keyed limit is the same limit as its key's config, step by step ------------------

TIERS: list[TokenBucket | FixedWindow] = [
    TokenBucket(3, 60),
    TokenBucket(5, 10, capacity=8, max_reserved=4),
    FixedWindow(4, 30, start=0),
    FixedWindow(2, 45, max_reserved=3),
]
Move = tuple[float, float, bool, int]
steps = st.lists(
    st.tuples(
        st.floats(0, 40),
        st.sampled_from([1, 2, 0.5]),
        st.booleans(),
        st.integers(0, len(TIERS) - 1),
    ),
    min_size=1,
    max_size=12,
)
START = datetime(2030, 1, 1, 12, 0, 7, tzinfo=UTC)


def replay(moved: Clock, moves: list[Move], *, keyed: bool) -> list[Any]:
    """Run ``moves`` on limit "plan" for key "k" from a fresh state at ``START``, each under
    its tier: through a keyed limit whose plan changes, or with the tier given inline.

    Return every answer and the stored state (one name and key: one window phase)."""
    reset_rate_limit("plan", all_keys=True)
    moved.moment = START
    plan = {"k": 0}
    limit = KeyedConfig(lambda key: TIERS[plan[key]] if key == "k" else TokenBucket(1, 1))
    answers: list[Any] = []
    for seconds, count, reserve, tier in moves:
        moved.advance(seconds)
        plan["k"] = tier
        if count > TIERS[tier].largest_count(reserve=reserve):
            continue
        config = limit if keyed else TIERS[tier]
        args: dict[str, Any] = {"key": "k", "count": count, "reserve": reserve, "config": config}
        answers += [rate_limit("plan", **args), check_rate_limit("plan", **args)]
    stored = RateLimitState.objects.filter(name="plan").values_list("key", "value", "ts")
    return [*answers, sorted(stored)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(moves=steps)
def test_a_keyed_limit_decides_as_its_keys_config_given_inline(
    moved: Clock, moves: list[Move]
) -> None:
    """Step by step, plan changes included: the keyed limit's answers and stored state are
    those of the key's config of the moment passed as ``config=``."""
    assert replay(moved, moves, keyed=True) == replay(moved, moves, keyed=False)


def test_a_value_above_the_capacity_is_cut_even_when_no_time_passed() -> None:
    """What a downgrade leaves stored: the projection caps it, at ts and past it."""
    above = State(50.0, 1000.0)
    assert project(TokenBucket(5, 60), above, 1000.0, 0.0) == State(5.0, 1000.0)
    assert project(FixedWindow(5, 60, start=0), above, 1010.0, 0.0) == State(5.0, 1000.0)
    assert project(TokenBucket(5, 60), State(3.0, 1000.0), 999.0, 0.0) == State(3.0, 1000.0)


# --- bad functions, bad results, bad declarations ---------------------------------------


def resolve(function: Any, key: str | None = "acme", shards: int = 1) -> Any:
    return get_rate_limit_config("llm", KeyedConfig(function, shards=shards), key)


def test_a_function_that_raises_names_the_limit_and_the_key() -> None:
    with pytest.raises(ValueError, match=r"'llm'.*broken_limit raised for key 'bad': Lookup"):
        resolve("tests.ratelimit.plans.broken_limit", "bad")
    with pytest.raises(ValueError) as raised:
        resolve(plans.broken_limit, "bad")
    assert isinstance(raised.value.__cause__, LookupError)


@pytest.mark.parametrize(
    ("returned", "why"),
    [
        (None, "must be a TokenBucket, a FixedWindow or a dict"),
        (42, "must be a TokenBucket"),
        ({"kind": "token bucket", "rate": float("inf"), "period": 60}, "rate must be a finite"),
        ({"kind": "token bucket", "rate": True, "period": 60}, "rate must be a finite"),
        ({"kind": "leaky", "rate": 1, "period": 60}, "Unknown rate-limit kind"),
        ({"per_key": "x"}, "Unknown rate-limit kind"),
        (KeyedConfig("x"), "must be a TokenBucket"),
    ],
)
def test_a_function_returning_garbage_names_the_limit_and_the_key(returned: Any, why: str) -> None:
    with pytest.raises(ValueError, match=r"'llm'.*invalid config for key 'acme'") as raised:
        resolve(lambda key: returned)
    assert why in str(raised.value)


def test_a_function_must_return_the_declared_shards() -> None:
    with pytest.raises(ValueError, match=r"returned 4 shard\(s\) for key 'acme'.*declared with 1"):
        resolve(lambda key: TokenBucket(8, 60, shards=4))
    assert resolve(lambda key: TokenBucket(8, 60, shards=4), shards=4).shard_count == 4


def test_a_path_that_does_not_import_or_call_is_an_error_naming_the_limit() -> None:
    with pytest.raises(ValueError, match=r"'llm'.*'tests.ratelimit.plans.nope' cannot be imp"):
        resolve("tests.ratelimit.plans.nope")
    with pytest.raises(ValueError, match=r"'llm'.*NOT_CALLABLE' is not callable"):
        resolve("tests.ratelimit.plans.NOT_CALLABLE")


@pytest.mark.parametrize("key", [7, b"acme", "x" * 256])
def test_a_bad_key_is_refused_before_the_function_is_called(key: Any) -> None:
    with pytest.raises(ValueError, match="key"):
        resolve(plans.plan_limit, key)
    assert plans.CALLS == []


def test_the_key_none_reaches_the_function_as_none() -> None:
    assert resolve(plans.plan_limit, None) == plans.TIERS["free"]
    assert plans.CALLS == [None]


@pytest.mark.parametrize(
    ("function", "shards", "message"),
    [
        (42, 1, "must be a callable"),
        ("", 1, "must be a callable"),
        (None, 1, "must be a callable"),
        ("a.b", 0, "shards must be an integer from 1 to 1024"),
        ("a.b", True, "shards must be an integer"),
        ("a.b", 2000, "shards must be an integer"),
    ],
)
def test_keyed_config_checks_its_fields(function: Any, shards: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KeyedConfig(function, shards=shards)


def test_the_settings_form_allows_only_per_key_and_shards() -> None:
    assert parse_limit({"per_key": "a.b", "shards": 2}) == KeyedConfig("a.b", 2)
    with pytest.raises(ValueError, match=r"Unknown key.*'rate'.*per-key"):
        parse_limit({"per_key": "a.b", "rate": 3})


# --- what the pages show: each row under its key's config --------------------------------


@override_settings(RATEQUEUE={"RATE_LIMITS": PER_PLAN})
def test_rows_are_projected_under_their_keys_config(moved: Clock) -> None:
    plans.PLANS["acme"] = "pro"
    oks(1, "acme")
    oks(1, "tiny")
    moved.advance(36)  # pro: +0.1, free: +0.02
    values = {row.key: project_row_value(row) for row in RateLimitState.objects.filter(name="llm")}
    assert values == {"acme": pytest.approx(19.1), "tiny": pytest.approx(1.02)}


@override_settings(
    RATEQUEUE={"RATE_LIMITS": {"llm": {"per_key": "tests.ratelimit.plans.broken_limit"}}}
)
def test_a_row_whose_function_fails_is_shown_as_stored() -> None:
    RateLimitState.objects.create(name="llm", key="bad", shard=0, value=1.0, ts=0.0)
    assert project_row_value(RateLimitState.objects.get()) is None

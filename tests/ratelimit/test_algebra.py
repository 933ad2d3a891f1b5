"""Property tests of the pure rate-limit algebra against an obviously correct model.

The model counts tokens step by step in exact fractions: a token bucket gains
``rate / period`` per second one clock tick at a time, a fixed window gains ``rate`` at
each window start it crosses; both cap at capacity. Clock ticks are a quarter second and
periods powers of two, so the floats of the implementation are exact and must agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_ratequeue.ratelimit.algebra import (
    Decision,
    State,
    better_shard,
    check_count,
    decide,
    project,
    two_choices,
    with_jitter,
)
from django_ratequeue.ratelimit.config import FixedWindow, RateLimitConfig, TokenBucket

EPOCH = 1_700_000_000  # a realistic clock, so float precision is tested where it matters
TICK = Fraction(1, 4)

token_buckets = st.builds(
    TokenBucket,
    rate=st.integers(1, 10),
    period=st.sampled_from([1, 2, 4, 8]),
    capacity=st.none() | st.integers(0, 12),
    max_reserved=st.none() | st.integers(0, 8),
)
fixed_windows = st.builds(
    FixedWindow,
    rate=st.integers(1, 10),
    period=st.sampled_from([1, 2, 4, 8]),
    capacity=st.none() | st.integers(0, 12),
    max_reserved=st.none() | st.integers(0, 8),
    start=st.none() | st.integers(0, 16).map(lambda s: EPOCH - s),
)
configs = token_buckets | fixed_windows
phases = st.sampled_from([0.0, 0.25, 0.5, 0.75])

operations = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(0, 48)),
        st.tuples(
            st.sampled_from(["consume", "check"]),
            st.integers(1, 16).map(lambda n: n / 2),  # counts in halves
            st.booleans(),
        ),
        st.tuples(st.just("reset")),
    ),
    max_size=40,
)


@dataclass
class Model:
    """Tokens of one limit, advanced one clock tick at a time, in exact arithmetic."""

    config: RateLimitConfig
    origin: Fraction  # where fixed windows are aligned
    now: Fraction
    tokens: Fraction

    @classmethod
    def fresh(cls, config: RateLimitConfig, now: Fraction, phase: float) -> Model:
        origin = Fraction(0)
        if isinstance(config, FixedWindow):
            origin = Fraction(
                config.start if config.start is not None else phase * config.period_seconds
            )
        return cls(config, origin, now, Fraction(config.max_tokens))

    def window(self, t: Fraction) -> int:
        return math.floor((t - self.origin) / Fraction(self.config.period_seconds))

    def tokens_at(self, t: Fraction) -> Fraction:
        tokens, clock, cap = self.tokens, self.now, Fraction(self.config.max_tokens)
        while clock < t:
            if isinstance(self.config, FixedWindow):
                for _ in range(self.window(clock + TICK) - self.window(clock)):
                    tokens = min(cap, tokens + self.config.rate)
            else:
                tokens = min(cap, tokens + Fraction(self.config.rate) * TICK / self.config.period)
            clock += TICK
        return tokens

    def advance(self, t: Fraction) -> None:
        self.tokens, self.now = self.tokens_at(t), t

    def admits(self, tokens: Fraction, count: float, reserve: bool) -> bool:
        if not reserve:
            return tokens >= Fraction(count)
        if self.config.max_reserved is None:
            return True
        return tokens - Fraction(count) >= -Fraction(self.config.max_reserved)


def assert_retry_at_is_exact(
    config: RateLimitConfig,
    state: State | None,
    now: float,
    count: float,
    reserve: bool,
    phase: float,
    decision: Decision,
) -> None:
    """A refused request succeeds at ``retry_at`` and not one float earlier; reserved work
    is covered exactly at ``retry_at``."""
    retry_at = decision.retry_at
    assert retry_at is not None and retry_at > now
    before = math.nextafter(retry_at, -math.inf)
    if not decision.ok:
        assert decide(config, state, retry_at, count, reserve=reserve, phase=phase).ok
        assert not decide(config, state, before, count, reserve=reserve, phase=phase).ok
    else:
        assert decision.state is not None
        assert project(config, decision.state, retry_at, phase).value >= 0
        assert project(config, decision.state, before, phase).value < 0


@settings(max_examples=300, deadline=None)
@given(config=configs, ops=operations, phase=phases)
def test_decisions_match_the_model(
    config: RateLimitConfig, ops: list[tuple], phase: float
) -> None:
    clock = Fraction(EPOCH)
    state: State | None = None
    model = Model.fresh(config, clock, phase)
    for op in ops:
        if op[0] == "step":
            clock += op[1] * TICK
            continue
        if op[0] == "reset":
            state, model = None, Model.fresh(config, clock, phase)
            continue
        kind, count, reserve = op
        if count > config.largest_count(reserve=reserve):
            with pytest.raises(ValueError, match="can never fit"):
                check_count(config, count, reserve=reserve)
            continue
        check_count(config, count, reserve=reserve)
        now = float(clock)
        model.advance(clock)
        decision = decide(config, state, now, count, reserve=reserve, phase=phase)
        assert decision.value == model.tokens
        assert decision.ok == model.admits(model.tokens, count, reserve)
        if decision.retry_at is not None:
            assert_retry_at_is_exact(config, state, now, count, reserve, phase, decision)
        if not decision.ok:
            assert decision.state is None
            # The model agrees: not enough at any tick before retry_at, enough at the next.
            later = clock + math.ceil((Fraction(decision.retry_at) - clock) / TICK) * TICK
            assert model.admits(model.tokens_at(later), count, reserve)
            assert not model.admits(model.tokens_at(later - TICK), count, reserve)
        elif not reserve or decision.state.value >= 0:  # type: ignore[union-attr]
            assert decision.retry_at is None
        if kind == "consume" and decision.ok:
            state = decision.state
            model.tokens -= Fraction(count)
        assert state is None or project(config, state, now, phase).value == model.tokens
        if state is not None and config.max_reserved is not None:
            assert state.value >= -config.max_reserved


@settings(max_examples=200, deadline=None)
@given(
    config=configs,
    gaps=st.lists(st.integers(0, 12), min_size=1, max_size=60),
    counts=st.lists(st.integers(1, 3), min_size=60, max_size=60),
    reserve=st.booleans(),
    phase=phases,
)
def test_admitted_totals_never_exceed_the_limit(
    config: RateLimitConfig, gaps: list[int], counts: list[int], reserve: bool, phase: float
) -> None:
    """Over any span, a token bucket admits at most capacity (+ max_reserved) plus what
    accrues in the span; a fixed window admits at most that in any one window."""
    if reserve and config.max_reserved is None:
        return  # unbounded reservations admit everything by design
    allowance = config.max_tokens + ((config.max_reserved or 0) if reserve else 0)
    state: State | None = None
    admitted: list[tuple[float, int]] = []
    now = float(EPOCH)
    for gap, count in zip(gaps, counts, strict=False):
        now += gap / 4
        if count > config.largest_count(reserve=reserve):
            continue
        decision = decide(config, state, now, count, reserve=reserve, phase=phase)
        if decision.ok:
            state = decision.state
            admitted.append((now, count))
    for i, (first, _) in enumerate(admitted):
        for j in range(i, len(admitted)):
            last = admitted[j][0]
            total = sum(count for _, count in admitted[i : j + 1])
            if isinstance(config, TokenBucket):
                accrued = (last - first) * config.rate / config.period_seconds
                assert total <= allowance + accrued + 1e-9
            else:
                phase_start = (
                    config.start_seconds
                    if config.start_seconds is not None
                    else phase * config.period_seconds
                )
                windows = math.floor((last - phase_start) / config.period_seconds) - math.floor(
                    (first - phase_start) / config.period_seconds
                )
                assert total <= allowance + windows * config.rate


def test_retry_at_is_exact_on_an_awkward_rate() -> None:
    """Rates that are not binary fractions still give a retry time that works."""
    config = TokenBucket(rate=7, period=3)
    state = State(0.1, 1_763_000_000.123)
    for count in (1, 2.5, 7):
        now = state.ts + 0.01
        decision = decide(config, state, now, count)
        assert not decision.ok
        assert_retry_at_is_exact(config, state, now, count, False, 0.0, decision)
    window = FixedWindow(rate=3, period=0.7, start=0.3)
    decision = decide(window, State(0, 1_763_000_000.2), 1_763_000_000.5, 2)
    assert_retry_at_is_exact(
        window, State(0, 1_763_000_000.2), 1_763_000_000.5, 2, False, 0, decision
    )


any_rate = st.floats(0.01, 10_000)
any_period = st.floats(0.001, 100_000)
any_config = st.builds(
    TokenBucket, rate=any_rate, period=any_period, max_reserved=st.none() | st.floats(0, 100)
) | st.builds(
    FixedWindow,
    rate=any_rate,
    period=any_period,
    max_reserved=st.none() | st.floats(0, 100),
    start=st.none() | st.floats(0, 2e9),
)


@settings(max_examples=500, deadline=None)
@given(
    config=any_config,
    fill=st.floats(-1, 1),
    ts=st.floats(1e9, 2e9),
    elapsed=st.floats(0, 1e5),
    share=st.floats(0.001, 1),
    reserve=st.booleans(),
    phase=st.floats(0, 0.999),
)
def test_retry_at_is_exact_for_any_rate(
    config: RateLimitConfig,
    fill: float,
    ts: float,
    elapsed: float,
    share: float,
    reserve: bool,
    phase: float,
) -> None:
    """Whatever the rates and clock, a retry at ``retry_at`` works and one float earlier
    does not."""
    largest = config.largest_count(reserve=reserve)
    count = share * (config.max_tokens if math.isinf(largest) else largest)
    if count <= 0:
        return
    state = project(config, State(fill * config.max_tokens, ts), ts, phase)
    now = ts + elapsed
    decision = decide(config, state, now, count, reserve=reserve, phase=phase)
    if decision.retry_at is not None:
        assert_retry_at_is_exact(config, state, now, count, reserve, phase, decision)


def test_a_clock_that_steps_back_adds_nothing() -> None:
    config = TokenBucket(rate=10, period=1)
    state = State(2, 1000.0)
    assert project(config, state, 999.0, 0) == state
    decision = decide(config, state, 999.0, 1)
    assert decision.state == State(1, 1000.0)


def test_fixed_window_state_moves_to_the_window_start() -> None:
    config = FixedWindow(rate=5, period=10, capacity=8, start=3)
    assert project(config, None, 27.5, 0) == State(8, 23)
    assert project(config, State(-4, 23), 45, 0) == State(6, 43)
    assert project(config, State(-4, 23), 60, 0) == State(8, 53)


@given(
    capacity=st.integers(0, 1000) | st.floats(0.1, 1000),
    rate=st.floats(0.1, 1000),
    shards=st.integers(1, 64),
)
def test_shard_shares_add_up_to_the_whole(capacity: float, rate: float, shards: int) -> None:
    config = TokenBucket(rate, 60, capacity=capacity, max_reserved=10, shards=shards)
    parts = [config.per_shard(shard) for shard in range(shards)]
    assert sum(part.max_tokens for part in parts) == pytest.approx(capacity)
    assert sum(part.rate for part in parts) == pytest.approx(rate)
    assert sum(part.max_reserved or 0 for part in parts) == pytest.approx(10)
    if float(capacity).is_integer() and capacity >= shards:
        assert all(part.max_tokens.is_integer() for part in parts)
        assert max(p.max_tokens for p in parts) - min(p.max_tokens for p in parts) <= 1
    assert config.smallest_share().max_tokens == min(part.max_tokens for part in parts)


@given(shards=st.integers(2, 64), data=st.data())
def test_two_choices_are_distinct_shards(shards: int, data: st.DataObject) -> None:
    first = data.draw(st.integers(0, shards - 1))
    second = data.draw(st.integers(0, shards - 2))
    a, b = two_choices(shards, first, second)
    assert a != b and 0 <= a < shards and 0 <= b < shards


def test_better_shard_prefers_room_then_the_earlier_retry() -> None:
    def d(ok: bool, value: float, retry_at: float | None = None) -> Decision:
        return Decision(ok, None, retry_at, value)

    assert better_shard((0, d(True, 2)), (1, d(True, 5))) == 1
    assert better_shard((0, d(True, 0.5)), (1, d(False, 5, 9))) == 0
    assert better_shard((0, d(False, 0, 20)), (1, d(False, 0, 10))) == 1


def test_jitter_adds_a_part_of_the_period() -> None:
    assert with_jitter(100, 60, 0) == 100
    assert with_jitter(100, 60, 0.5) == 130

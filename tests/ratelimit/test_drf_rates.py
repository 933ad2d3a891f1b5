"""What a DRF rate string ``"n/period"`` admits, proven on the pure algebra.

Requests arrive at arbitrary times (a millisecond grid on a realistic clock); each is
admitted or refused by :func:`decide`, as a throttle does. The default reading is a
token bucket of ``n`` per period: up to ``2n - 1`` admitted within one period, and that
many are reachable by a client that comes back when told. The strict reading never
admits more than ``n`` within any period, whatever the burst.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given, settings
from hypothesis import strategies as st

from django_ratequeue.contrib.drf import parse_drf_rate
from django_ratequeue.ratelimit.algebra import State, decide
from django_ratequeue.ratelimit.config import TokenBucket

EPOCH = 1_700_000_000
PERIODS = {"s": 1, "m": 60, "h": 3600}


def admitted_times(config: TokenBucket, offsets_ms: list[int]) -> list[Fraction]:
    """The arrival times (exact, in seconds after EPOCH) of the requests admitted."""
    state: State | None = None
    admitted = []
    now_ms = 0
    for offset in offsets_ms:
        now_ms += offset
        decision = decide(config, state, EPOCH + now_ms / 1000)
        if decision.ok:
            state = decision.state
            admitted.append(Fraction(now_ms, 1000))
    return admitted


def most_in_any_period(times: list[Fraction], period: int) -> int:
    """The most of ``times`` in any window ``[t, t + period)``: windows that start at a
    request are enough, since moving a window's start up to the next request loses none."""
    return max((sum(1 for u in times if t <= u < t + period) for t in times), default=0)


rates = st.tuples(st.integers(1, 8), st.sampled_from(sorted(PERIODS)))


@st.composite
def arrivals(draw: st.DrawFn, period: int) -> list[int]:
    """Bursts and gaps from 0 to a bit more than a period, in milliseconds."""
    gap = st.integers(0, 1200 * period) | st.just(0) | st.integers(0, 50)
    return draw(st.lists(gap, min_size=1, max_size=60))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rate=rates)
def test_strict_never_admits_more_than_n_in_any_period(data: st.DataObject, rate: tuple) -> None:
    n, unit = rate
    burst = data.draw(st.integers(1, n))
    period = PERIODS[unit]
    config = parse_drf_rate(f"{n}/{unit}", strict=True, burst=burst)
    times = admitted_times(config, data.draw(arrivals(period)))

    assert most_in_any_period(times, period) <= n


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rate=rates)
def test_default_reading_admits_fewer_than_2n_in_any_period(
    data: st.DataObject, rate: tuple
) -> None:
    n, unit = rate
    period = PERIODS[unit]
    times = admitted_times(parse_drf_rate(f"{n}/{unit}"), data.draw(arrivals(period)))

    assert most_in_any_period(times, period) <= 2 * n - 1


@pytest.mark.parametrize("n", [1, 3, 100])
def test_a_client_that_retries_when_told_gets_2n_minus_1_in_a_minute(n: int) -> None:
    """Ask at once, and again when refused, at the retry time the refusal gave: 2n - 1
    admitted before the minute is over, where DRF's sliding log admits n."""
    config = parse_drf_rate(f"{n}/min")
    state, now, admitted = None, float(EPOCH), 0
    while now < EPOCH + 60:
        decision = decide(config, state, now)
        if decision.ok:
            state, admitted = decision.state, admitted + 1
        else:
            assert decision.retry_at is not None
            now = decision.retry_at

    assert admitted == 2 * n - 1


def test_strict_readings() -> None:
    assert parse_drf_rate("3/min", strict=True) == TokenBucket(rate=3, period=60, capacity=1)
    assert parse_drf_rate("3/min", strict=True, burst=3) == TokenBucket(1, 60, capacity=3)
    for burst in [0, 4, 1.5, True, "2"]:
        with pytest.raises(ImproperlyConfigured, match="burst must be a whole number from 1"):
            parse_drf_rate("3/min", strict=True, burst=burst)  # type: ignore[arg-type]

"""The arithmetic of rate limits on two numbers, ``value`` and ``ts``: pure functions.

The caller passes ``now`` (seconds since the epoch) and any random draw, so every decision
can be replayed in tests. Times returned are the first representable instants at which
the answer changes. docs/concepts.md ("Rate limits") gives each kind's formulas, the
reservations, and why retrying exactly at ``retry_at`` succeeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from django_ratequeue.ratelimit.config import MAX_TOKENS, FixedWindow, RateLimitConfig, TokenBucket


@dataclass(frozen=True, slots=True)
class State:
    """What is stored for one (name, key, shard)."""

    value: float
    ts: float


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of asking for ``count`` tokens at ``now``.

    ``state`` is what to store (``None`` when nothing may be written: the request was
    refused). ``retry_at`` is, when refused, the earliest time the same request could
    succeed; when admitted by reserving, the time the reserved work may run; otherwise
    ``None``. ``value`` is the tokens available at ``now`` before this request.
    """

    ok: bool
    state: State | None
    retry_at: float | None
    value: float


def check_count(config: RateLimitConfig, count: float, *, reserve: bool) -> None:
    """Raise ``ValueError`` unless every shard of ``config`` could ever admit ``count``.

    It must be a positive number, at most ``MAX_TOKENS``, that fits into the smallest
    shard's share (with its ``max_reserved`` when reserving)."""
    if isinstance(count, bool) or not isinstance(count, int | float) or not count > 0:
        raise ValueError(f"count must be a positive number, got {count!r}.")
    if not count <= MAX_TOKENS:  # also inf, and big ints that floats cannot hold
        raise ValueError(f"count must be at most {MAX_TOKENS:g}, got {count!r}.")
    share = config.smallest_share()
    largest = share.largest_count(reserve=reserve)
    if count > largest:
        shards = f" per shard ({config.shard_count} shards)" if config.shard_count > 1 else ""
        reserved = (
            f" plus max_reserved {share.max_reserved:g}"
            if reserve
            else " (pass reserve=True to borrow from future periods)"
        )
        raise ValueError(
            f"count {count:g} can never fit: the limit holds at most {largest:g} tokens"
            f"{shards}: capacity {share.max_tokens:g}{reserved}."
        )


def window_start(config: FixedWindow, now: float, phase: float) -> float:
    """Return the start of the window containing ``now``.

    ``phase`` in [0, 1) is used without a configured ``start``."""
    period = config.period_seconds
    origin = config.start_seconds
    if origin is None:
        origin = phase * period
    return origin + math.floor((now - origin) / period) * period


def project(config: RateLimitConfig, state: State | None, now: float, phase: float) -> State:
    """Return the state as of ``now``: tokens accrued since ``ts`` added, capped at capacity.

    A missing state is a full limit. For a fixed window ``ts`` becomes the start of the
    current window; for a token bucket, ``now``. A clock that went backwards adds nothing.
    A value above the capacity (a keyed limit whose key's capacity shrank) is cut to it.
    """
    capacity = config.max_tokens
    if isinstance(config, FixedWindow):
        if state is None:
            return State(capacity, window_start(config, now, phase))
        period = config.period_seconds
        windows = math.floor((now - state.ts) / period) if now > state.ts else 0
        if windows <= 0:
            return _capped(state, capacity)
        return State(
            min(state.value + config.rate * windows, capacity), state.ts + windows * period
        )
    if state is None:
        return State(capacity, now)
    if now <= state.ts:
        return _capped(state, capacity)
    accrued = (now - state.ts) * config.rate / config.period_seconds
    return State(min(state.value + accrued, capacity), now)


def _capped(state: State, capacity: float) -> State:
    """Return ``state`` with its value cut to ``capacity`` (the same state if within it)."""
    return state if state.value <= capacity else State(capacity, state.ts)


def decide(
    config: RateLimitConfig,
    state: State | None,
    now: float,
    count: float = 1,
    *,
    reserve: bool = False,
    phase: float = 0.0,
) -> Decision:
    """Take ``count`` tokens at ``now`` if the limit allows it.

    Without ``reserve`` the value must stay at or above zero; with it, at or above
    ``-max_reserved`` (unbounded when ``None``). ``config`` is one row's (per-shard)
    configuration; ``check_count`` must have accepted ``count``.
    """
    current = project(config, state, now, phase)
    # What may be borrowed; compared as ``value + allowance`` like ``largest_count`` so
    # that a count ``check_count`` accepts is always admitted by a full limit.
    allowance = _allowance(config) if reserve else 0.0
    if current.value + allowance < count:
        # Projected from the stored state, as a retry will be: floats make projecting to
        # ``now`` and then on to ``t`` differ from projecting to ``t`` in the last bit.
        retry_at = _earliest(
            lambda t: project(config, state, t, phase).value + allowance >= count,
            now,
            _estimate(config, current, count - allowance),
        )
        return Decision(False, None, retry_at, current.value)
    remaining = current.value - count
    new_state = State(
        remaining, max(current.ts, now) if isinstance(config, TokenBucket) else current.ts
    )
    if remaining >= 0:
        return Decision(True, new_state, None, current.value)
    run_at = _earliest(
        lambda t: project(config, new_state, t, phase).value >= 0,
        now,
        _estimate(config, new_state, 0.0),
    )
    return Decision(True, new_state, run_at, current.value)


def _allowance(config: RateLimitConfig) -> float:
    """Return how far a reservation may take the value below zero (``max_reserved``)."""
    return math.inf if config.max_reserved is None else config.max_reserved


def _estimate(config: RateLimitConfig, state: State, needed: float) -> float:
    """Return when ``state`` will hold ``needed`` tokens, up to rounding of the last bit."""
    deficit = needed - state.value
    if isinstance(config, FixedWindow):
        return state.ts + math.ceil(deficit / config.rate) * config.period_seconds
    return state.ts + deficit * config.period_seconds / config.rate


def _earliest(reached: Callable[[float], bool], now: float, estimate: float) -> float:
    """Return the first float time after ``now`` at which ``reached`` (monotonic) holds.

    The closed-form ``estimate`` can be off in the last bits; bisecting over floats
    around it makes ``retry_at`` exact: it admits, and the float before it does not.
    """
    hi = max(estimate, now)
    step = math.ulp(hi)
    while not reached(hi):
        hi += step
        step *= 2
    lo = max(now, estimate - 4 * math.ulp(estimate))
    if lo >= hi or reached(lo):
        lo = now
    while (mid := lo + (hi - lo) / 2) not in (lo, hi):
        if reached(mid):
            hi = mid
        else:
            lo = mid
    return hi


def with_jitter(retry_at: float, period: float, fraction: float) -> float:
    """Return ``retry_at`` plus ``fraction`` (a random draw in [0, 1)) of ``period``.

    Clients told to retry at the same instant would otherwise arrive as a herd.
    """
    return retry_at + fraction * period


def two_choices(shards: int, first: int, second: int) -> tuple[int, int]:
    """Return two distinct shards from two random draws.

    The draws are in ``range(shards)`` and ``range(shards - 1)`` (the second skips the
    first)."""
    if shards == 1:
        return 0, 0
    return first, second + (second >= first)


def better_shard(a: tuple[int, Decision], b: tuple[int, Decision]) -> int:
    """Return the better of two shards: the one with more room, or the one free sooner.

    This is the power of two choices."""
    (shard_a, da), (shard_b, db) = a, b
    if da.ok and db.ok:
        return shard_a if da.value >= db.value else shard_b
    if da.ok or db.ok:
        return shard_a if da.ok else shard_b
    return shard_a if (da.retry_at or 0) <= (db.retry_at or 0) else shard_b


def refill_time(
    config: RateLimitConfig, value: float, ts: float, needed: float, now: float
) -> float:
    """Return when a limit holding ``value`` tokens (as of ``now``) holds ``needed``.

    ``ts`` is the state's time (a fixed window's start). Reservations owed make
    ``value`` negative."""
    deficit = needed - value
    if deficit <= 0:
        return now
    if isinstance(config, FixedWindow):
        start = window_start(config, now, 0.0) if ts > now else ts
        return start + math.ceil(deficit / config.rate) * config.period_seconds
    return now + deficit * config.period_seconds / config.rate

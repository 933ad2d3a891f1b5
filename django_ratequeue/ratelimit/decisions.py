"""Consume, check, reset and read rate limits by name: the public rate-limit functions.

A limit's configuration comes from ``config=`` or ``RATEQUEUE["RATE_LIMITS"][name]``, for a
keyed limit (:class:`.config.KeyedConfig`) from its function of the key at each call. A
consume locks the limit's row (on PostgreSQL in one statement, :mod:`.sql`), so it never
over-admits, and joins an outer ``transaction.atomic()``. docs/concepts.md ("Rate
limits") tells why, and how shards and the database's clock come in.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django_ratequeue import clock
from django_ratequeue.exceptions import RateLimited
from django_ratequeue.ratelimit import storage, tally
from django_ratequeue.ratelimit.algebra import (
    Decision,
    State,
    better_shard,
    project,
    with_jitter,
)
from django_ratequeue.ratelimit.config import RateLimitConfig, check_limit_name
from django_ratequeue.ratelimit.counting import count_decision
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.resolve import ConfigLike, configured_config, get_rate_limit_config
from django_ratequeue.ratelimit.resolve import row_key as _row_key
from django_ratequeue.ratelimit.taking import Request, phase, take


@dataclass(frozen=True, slots=True)
class RateLimitResult:
    """The answer of :func:`rate_limit` and :func:`check_rate_limit`.

    ``ok`` says whether the request is (or would be) admitted. ``retry_at`` and
    ``retry_after`` (seconds from now) say, when refused, when the same request could
    succeed; when admitted by a reservation, when the reserved work may run. ``value`` is
    the tokens available before this request: of the shard used by a sharded consume,
    summed over all shards by a check.
    """

    ok: bool
    retry_at: datetime | None = None
    retry_after: float | None = None
    value: float | None = None


# --- decisions -------------------------------------------------------------------------


def rate_limit(
    name: str,
    *,
    key: str | None = None,
    count: float = 1,
    reserve: bool = False,
    throws: bool = False,
    config: ConfigLike | None = None,
) -> RateLimitResult:
    """Consume ``count`` tokens from the limit ``name`` (for ``key``) if it allows it.

    With ``reserve=True`` the tokens are borrowed from the future when there are not
    enough (up to ``max_reserved``); ``retry_at`` then says when the work may run.
    With ``throws=True`` a refusal raises :class:`~django_ratequeue.RateLimited`.
    """
    resolved = get_rate_limit_config(name, config, key)
    tally.add(name, key, resolved, count, reserve)
    return _consume(name, resolved, key, count, reserve, throws)


def check_rate_limit(
    name: str,
    *,
    key: str | None = None,
    count: float = 1,
    reserve: bool = False,
    throws: bool = False,
    config: ConfigLike | None = None,
) -> RateLimitResult:
    """Return what :func:`rate_limit` would answer now, without consuming anything."""
    return _check(name, get_rate_limit_config(name, config, key), key, count, reserve, throws)


def reset_rate_limit(name: str, *, key: str | None = None, all_keys: bool = False) -> None:
    """Forget the state of ``name`` for ``key`` (every shard): the limit is full again.

    With ``all_keys=True``, forget it for every key."""
    check_limit_name(name)
    connection = storage.connection_for_write()
    if not all_keys:
        storage.delete_rows(connection, name, _row_key(key))
    elif key is not None:
        raise ValueError("Pass either key= or all_keys=True to reset_rate_limit(), not both.")
    else:
        storage.delete_all_rows(connection, name)


def get_rate_limit_value(
    name: str, *, key: str | None = None, config: ConfigLike | None = None
) -> float:
    """Return the tokens available now for ``name`` and ``key``, summed over shards."""
    return _value(name, get_rate_limit_config(name, config, key), key)


def _consume(
    name: str, limit: RateLimitConfig, key: str | None, count: float, reserve: bool, throws: bool
) -> RateLimitResult:
    request = Request.of(name, limit, key, count, reserve)
    connection = storage.connection_for_write()
    decision = take(connection, request)
    count_decision(connection, name, decision)
    return _result(name, key, decision, throws)


def _check(
    name: str, limit: RateLimitConfig, key: str | None, count: float, reserve: bool, throws: bool
) -> RateLimitResult:
    request = Request.of(name, limit, key, count, reserve)
    states = storage.read_rows(
        storage.connection_for_write(),
        request.name,
        request.key,
        None if limit.shard_count > 1 else (0,),
    )
    now = clock.timestamp()
    decisions = [
        (shard, request.decide(shard, states.get(shard), now))
        for shard in range(limit.shard_count)
    ]
    best = dict(decisions)[_best_shard(decisions)]
    total = sum(decision.value for _, decision in decisions)
    return _result(name, key, Decision(best.ok, None, best.retry_at, total), throws)


def _best_shard(decisions: list[tuple[int, Decision]]) -> int:
    best = decisions[0]
    for candidate in decisions[1:]:
        shard = better_shard(best, candidate)
        best = best if shard == best[0] else candidate
    return best[0]


def _value(name: str, limit: RateLimitConfig, key: str | None) -> float:
    return sum(state.value for state in shard_states(name, limit, key, clock.timestamp()).values())


def _result(name: str, key: str | None, decision: Decision, throws: bool) -> RateLimitResult:
    if decision.retry_at is None:
        result = RateLimitResult(decision.ok, value=decision.value)
    else:
        result = RateLimitResult(
            decision.ok,
            retry_at=_aware(decision.retry_at),
            retry_after=max(0.0, decision.retry_at - clock.timestamp()),
            value=decision.value,
        )
    if throws and not result.ok:
        raise RateLimited(name, key, result.retry_at)
    return result


# The latest time a result names: a reservation that far ahead (a limit refilling a few
# tokens a decade) says "not before the year 9999" rather than overflow.
LATEST_TIMESTAMP = datetime(9999, 1, 1, tzinfo=UTC).timestamp()


def _aware(timestamp: float) -> datetime:
    """Return an aware UTC datetime, rounded up to the microsecond so it is never too early."""
    timestamp = min(timestamp, LATEST_TIMESTAMP)
    return datetime.fromtimestamp(math.ceil(timestamp * 1_000_000) / 1_000_000, tz=UTC)


# --- helpers for callers and for the admin ---------------------------------------------


def jittered_retry_at(retry_at: datetime, period: float | timedelta) -> datetime:
    """Return ``retry_at`` plus a random part of ``period`` (pass the limit's ``period``).

    So refused clients do not return all at once."""
    seconds = period.total_seconds() if isinstance(period, timedelta) else float(period)
    return _aware(with_jitter(retry_at.timestamp(), seconds, random.random()))


def shard_states(
    name: str, limit: RateLimitConfig, key: str | None, now: float
) -> dict[int, State]:
    """Return every shard's state projected to ``now`` (a missing row is a full share).

    They are read with one plain ``SELECT``: what :func:`get_rate_limit_value` adds
    up."""
    row_key = _row_key(key)
    states = storage.read_rows(storage.connection_for_write(), name, row_key)
    window_phase = phase(name, row_key)
    return {
        shard: project(limit.per_shard(shard), states.get(shard), now, window_phase)
        for shard in range(limit.shard_count)
    }


def project_row_value(
    row: RateLimitState, config: RateLimitConfig | None = None, now: float | None = None
) -> float | None:
    """Return the tokens ``row`` holds now (its share, for a shard), if it can tell.

    ``None`` if its name is no longer configured (and no ``config`` is given), has fewer
    shards now, or its per-key function fails for the row's key."""
    if config is None:
        config = configured_config(row.name, row.key or None)
        if config is None:
            return None
    if row.shard >= config.shard_count:
        return None
    state = State(row.value, row.ts)
    when = clock.timestamp() if now is None else now
    return project(config.per_shard(row.shard), state, when, phase(row.name, row.key)).value

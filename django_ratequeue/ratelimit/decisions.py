"""Consume, check, reset and read rate limits by name: the public rate-limit functions.

A limit's configuration comes from ``config=`` or ``RATEQUEUE["RATE_LIMITS"][name]``, for a
keyed limit (:class:`.config.KeyedConfig`) from its function of the key at each call. A
consume locks the limit's row (on PostgreSQL in one statement, :mod:`.sql`), so it never
over-admits, and joins an outer ``transaction.atomic()``. docs/concepts.md ("Rate
limits") tells why, and how shards and the database's clock come in.
"""

from __future__ import annotations

import logging
import math
import random
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.exceptions import RateLimited
from django_ratequeue.ratelimit import sql, storage, tally
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
from django_ratequeue.ratelimit.config import RateLimitConfig, check_limit_name
from django_ratequeue.ratelimit.counting import count_decision
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.resolve import ConfigLike, configured_config, get_rate_limit_config
from django_ratequeue.ratelimit.resolve import row_key as _row_key

logger = logging.getLogger(__name__)


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


# --- configuration (resolved in .resolve) ----------------------------------------------


def _phase(name: str, key: str) -> float:
    """Return the random-looking but stable window phase of a fixed window without ``start``.

    Derived from the name and key so that every process (and every check) agrees on it,
    while different keys do not all refill at the same instant.
    """
    return zlib.crc32(f"{name}\0{key}".encode()) / 2**32


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


@dataclass(frozen=True, slots=True)
class _Request:
    """One call resolved: which rows, how many tokens, and how to decide on them."""

    name: str
    key: str
    limit: RateLimitConfig
    count: float
    reserve: bool

    @classmethod
    def of(
        cls, name: str, limit: RateLimitConfig, key: str | None, count: float, reserve: bool
    ) -> _Request:
        try:
            check_count(limit, count, reserve=reserve)
        except ValueError as error:  # named: a request may draw on several limits
            raise ValueError(f"Rate limit {name!r}: {error}") from None
        return cls(name, _row_key(key), limit, count, reserve)

    @property
    def phase(self) -> float:
        return _phase(self.name, self.key)

    def decide(self, shard: int, state: State | None, now: float) -> Decision:
        return decide(
            self.limit.per_shard(shard),
            state,
            now,
            self.count,
            reserve=self.reserve,
            phase=self.phase,
        )


def _consume(
    name: str, limit: RateLimitConfig, key: str | None, count: float, reserve: bool, throws: bool
) -> RateLimitResult:
    request = _Request.of(name, limit, key, count, reserve)
    connection = storage.connection_for_write()
    if connection.vendor == "postgresql":
        decision = _take_in_one_statement(connection, request)
    else:
        # No savepoint: a refusal writes nothing, and any error aborts the caller's block.
        with transaction.atomic(using=connection.alias, savepoint=False):
            if limit.shard_count == 1:
                decision = _take(connection, request, 0)
            else:
                decision = _take_from_shards(connection, request)
    count_decision(connection, name, decision)
    return _result(name, key, decision, throws)


def _take_in_one_statement(connection: BaseDatabaseWrapper, request: _Request) -> Decision:
    """Lock, decide and write in one statement, on PostgreSQL (see :mod:`.sql`).

    A sharded limit offers two random shards and locks the better one no one else holds;
    if the other one would admit while the locked one does not, or both are held, it
    waits for one. Missing rows (every shard's) are created full and the statement runs
    again.
    """
    shards = request.limit.shard_count
    candidates = _offered_shards(shards)
    # RATE_LIMIT_ASYNC_COMMIT: a statement that is its own transaction commits without
    # waiting for the WAL flush (about twice the decisions per second); a PostgreSQL crash
    # may then forget the consumes of its last fraction of a second. Rate-limit state is
    # soft, and a caller's transaction keeps its own durability.
    async_commit = ratequeue_settings().RATE_LIMIT_ASYNC_COMMIT and connection.get_autocommit()
    while True:
        now = clock.timestamp()
        taken = sql.take(
            connection,
            request.limit,
            request.name,
            request.key,
            candidates,
            request.count,
            now,
            reserve=request.reserve,
            async_commit=async_commit,
        )
        if taken is not None and (taken.applied or not taken.other_admits):
            return _as_taken(request, taken, now)
        if taken is None and len(candidates) == 1:
            fresh = {
                shard: project(request.limit.per_shard(shard), None, now, request.phase)
                for shard in range(shards)
            }
            storage.insert_rows(connection, request.name, request.key, fresh)
        else:  # held by other consumers (or missing): wait for one, the other if it admits
            candidates = tuple(s for s in candidates if taken is None or s != taken.shard)[:1]


def _offered_shards(shards: int) -> tuple[int, ...]:
    """Return the shards a request offers: two random ones of a sharded limit, else 0."""
    if shards > 1:
        return two_choices(shards, random.randrange(shards), random.randrange(shards - 1))
    return (0,)


def _as_taken(request: _Request, taken: sql.Taken, now: float) -> Decision:
    """Return the decision on what the statement did: the algebra's, unless they part."""
    decision = request.decide(taken.shard, taken.state, now)
    if decision.ok != taken.applied:
        # The statement computes in float8 what the algebra computes in Python
        # floats (the tests prove them equal); should they ever part at a last-bit
        # boundary, what the database did stands, and a refusal may retry at once.
        logger.warning("Rate limit %r: the SQL and the algebra disagree", request.name)
        retry_at = None if taken.applied else now
        decision = Decision(taken.applied, None, retry_at, decision.value)
    return decision


def _take(connection: BaseDatabaseWrapper, request: _Request, shard: int) -> Decision:
    """Lock one row (creating it if needed), decide, and write the new state if admitted."""
    name, key = request.name, request.key
    while True:
        locked = storage.lock_row(connection, name, key, shard)
        now = clock.timestamp()
        if locked is not None:
            row_id, state = locked
            decision = request.decide(shard, state, now)
            if decision.state is not None and decision.state != state:
                storage.update_row(connection, row_id, decision.state)
            return decision
        decision = request.decide(shard, None, now)
        if decision.state is None or storage.insert_rows(
            connection, name, key, {shard: decision.state}
        ):
            return decision
        # Another transaction created the row first: lock it and decide again.


def _take_from_shards(connection: BaseDatabaseWrapper, request: _Request) -> Decision:
    """Take from the better of two random shards: read both, lock the one with more room.

    The power of two choices."""
    shards = request.limit.shard_count
    pair = two_choices(shards, random.randrange(shards), random.randrange(shards - 1))
    states = storage.read_rows(connection, request.name, request.key, pair)
    now = clock.timestamp()
    predicted = {shard: request.decide(shard, states.get(shard), now) for shard in pair}
    first = better_shard(*predicted.items())
    decision = _take(connection, request, first)
    other = pair[1] if first == pair[0] else pair[0]
    if decision.ok or not predicted[other].ok:
        return decision
    return _take(connection, request, other)


def _check(
    name: str, limit: RateLimitConfig, key: str | None, count: float, reserve: bool, throws: bool
) -> RateLimitResult:
    request = _Request.of(name, limit, key, count, reserve)
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
    phase = _phase(name, row_key)
    return {
        shard: project(limit.per_shard(shard), states.get(shard), now, phase)
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
    return project(config.per_shard(row.shard), state, when, _phase(row.name, row.key)).value

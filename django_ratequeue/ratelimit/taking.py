"""How a consume takes its tokens from a limit's rows, under their lock.

On PostgreSQL in one statement (:mod:`.sql`): a sharded limit first tries one random
shard no one else holds, then the better of two. Elsewhere the row is locked, decided on
in Python (:mod:`.algebra`) and written. docs/concepts.md ("Rate limits") tells why.
"""

from __future__ import annotations

import logging
import random
import zlib
from dataclasses import dataclass

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.ratelimit import sql, storage
from django_ratequeue.ratelimit.algebra import (
    Decision,
    State,
    better_shard,
    check_count,
    decide,
    project,
    two_choices,
)
from django_ratequeue.ratelimit.config import RateLimitConfig
from django_ratequeue.ratelimit.resolve import row_key

logger = logging.getLogger(__name__)


def phase(name: str, key: str) -> float:
    """Return the random-looking but stable window phase of a fixed window without ``start``.

    Derived from the name and key so that every process (and every check) agrees on it,
    while different keys do not all refill at the same instant.
    """
    return zlib.crc32(f"{name}\0{key}".encode()) / 2**32


@dataclass(frozen=True, slots=True)
class Request:
    """One call resolved: which rows, how many tokens, and how to decide on them."""

    name: str
    key: str
    limit: RateLimitConfig
    count: float
    reserve: bool

    @classmethod
    def of(
        cls, name: str, limit: RateLimitConfig, key: str | None, count: float, reserve: bool
    ) -> Request:
        try:
            check_count(limit, count, reserve=reserve)
        except ValueError as error:  # named: a request may draw on several limits
            raise ValueError(f"Rate limit {name!r}: {error}") from None
        return cls(name, row_key(key), limit, count, reserve)

    @property
    def phase(self) -> float:
        return phase(self.name, self.key)

    def decide(self, shard: int, state: State | None, now: float) -> Decision:
        return decide(
            self.limit.per_shard(shard),
            state,
            now,
            self.count,
            reserve=self.reserve,
            phase=self.phase,
        )


def take(connection: BaseDatabaseWrapper, request: Request) -> Decision:
    """Take ``request``'s tokens from its rows, or refuse; return the decision."""
    if connection.vendor == "postgresql":
        return _take_in_one_statement(connection, request)
    # No savepoint: a refusal writes nothing, and any error aborts the caller's block.
    with transaction.atomic(using=connection.alias, savepoint=False):
        if request.limit.shard_count == 1:
            return _take(connection, request, 0)
        return _take_from_shards(connection, request)


# The sharded limits' keys (name, stored key) whose last decision in this process was a
# refusal: a key near its limit is refused by one random shard more often than not, so
# its decisions go straight to the two shards' statement (one statement a decision,
# admitted or not). An admit forgets the key; past REFUSED_KEPT keys all are forgotten.
_REFUSED: dict[tuple[str, str], None] = {}
REFUSED_KEPT = 10_000


def _take_in_one_statement(connection: BaseDatabaseWrapper, request: Request) -> Decision:
    """Lock, decide and write in one statement, on PostgreSQL (see :mod:`.sql`).

    A sharded limit first tries one random shard that no one else holds: the one-row
    statement, which is all a limit with room left needs (unless the key's last decision
    in this process was a refusal: see :data:`_REFUSED`). When that shard is held or
    refuses, it offers two random shards and locks the better one no one else holds;
    if the other one would admit while the locked one does not, or both are held, it
    waits for one. Missing rows (every shard's) are created full and the statement runs
    again.
    """
    shards = request.limit.shard_count
    refused = (request.name, request.key)
    if shards > 1 and refused not in _REFUSED:
        taken, now = _take_now(connection, request, (random.randrange(shards),), skip=True)
        if taken is not None and taken.applied:
            return _as_taken(request, taken, now)
    candidates = _offered_shards(shards)
    while True:
        taken, now = _take_now(connection, request, candidates)
        if taken is not None and (taken.applied or not taken.other_admits):
            if shards > 1:
                _remember(refused, taken.applied)
            return _as_taken(request, taken, now)
        if taken is None and len(candidates) == 1:
            fresh = {
                shard: project(request.limit.per_shard(shard), None, now, request.phase)
                for shard in range(shards)
            }
            storage.insert_rows(connection, request.name, request.key, fresh)
        else:  # held by other consumers (or missing): wait for one, the other if it admits
            candidates = tuple(s for s in candidates if taken is None or s != taken.shard)[:1]


def _remember(key: tuple[str, str], admitted: bool) -> None:
    """Note in :data:`_REFUSED` whether a sharded limit's ``key`` (name, key) admitted."""
    if admitted:
        _REFUSED.pop(key, None)
        return
    if len(_REFUSED) >= REFUSED_KEPT:
        _REFUSED.clear()
    _REFUSED[key] = None


def _take_now(
    connection: BaseDatabaseWrapper,
    request: Request,
    candidates: tuple[int, ...],
    skip: bool = False,
) -> tuple[sql.Taken | None, float]:
    """Run the consume's statement over ``candidates`` now; return what it did, and now."""
    # RATE_LIMIT_ASYNC_COMMIT: a statement that is its own transaction commits without
    # waiting for the WAL flush (about twice the decisions per second); a PostgreSQL crash
    # may then forget the consumes of its last fraction of a second. Rate-limit state is
    # soft, and a caller's transaction keeps its own durability.
    async_commit = ratequeue_settings().RATE_LIMIT_ASYNC_COMMIT and connection.get_autocommit()
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
        skip_locked=skip,
    )
    return taken, now


def _offered_shards(shards: int) -> tuple[int, ...]:
    """Return the shards a request offers: two random ones of a sharded limit, else 0."""
    if shards > 1:
        return two_choices(shards, random.randrange(shards), random.randrange(shards - 1))
    return (0,)


def _as_taken(request: Request, taken: sql.Taken, now: float) -> Decision:
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


def _take(connection: BaseDatabaseWrapper, request: Request, shard: int) -> Decision:
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


def _take_from_shards(connection: BaseDatabaseWrapper, request: Request) -> Decision:
    """Take from the better of two random shards: read both, lock the one with more room.

    The power of two choices."""
    pair = _offered_shards(request.limit.shard_count)
    states = storage.read_rows(connection, request.name, request.key, pair)
    now = clock.timestamp()
    predicted = {shard: request.decide(shard, states.get(shard), now) for shard in pair}
    first = better_shard(*predicted.items())
    decision = _take(connection, request, first)
    other = pair[1] if first == pair[0] else pair[0]
    if decision.ok or not predicted[other].ok:
        return decision
    return _take(connection, request, other)

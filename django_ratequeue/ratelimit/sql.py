"""A consume on PostgreSQL as one SQL statement: lock, project, decide and write.

Why this exists: deciding in Python costs four round trips (``BEGIN``, ``SELECT ... FOR
UPDATE``, ``UPDATE``, ``COMMIT``) and Django's ``atomic()``, while the arithmetic is a
handful of float operations. This module states the projection of :mod:`.algebra` in SQL,
with the same float8 operations in the same order, so that the statement admits exactly
when :func:`.algebra.decide` would (``tests/ratelimit/test_sql.py`` checks both on random
states). The statement returns the state it found; Python derives ``retry_at`` and
``value`` from it with the algebra, which stays the reference.

With several candidate shards the statement locks those no one else holds (``SKIP
LOCKED``) and takes the one that admits with the most tokens: the power of two choices
without waiting behind another consumer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .algebra import State
from .config import FixedWindow, RateLimitConfig
from .models import RateLimitState


@dataclass(frozen=True, slots=True)
class Taken:
    """What the statement did: the ``shard`` it chose, that shard's stored ``state`` before
    the consume, whether the consume was ``applied``, and how many candidates it ``locked``."""

    shard: int
    state: State
    applied: bool
    locked: int


def take(
    connection: BaseDatabaseWrapper,
    config: RateLimitConfig,
    name: str,
    key: str,
    candidates: tuple[int, ...],
    count: float,
    now: float,
    *,
    reserve: bool,
    skip_locked: bool,
    async_commit: bool,
) -> Taken | None:
    """Consume ``count`` from the best of the ``candidates`` shards in one statement.

    ``None`` when no candidate row could be locked: missing, or (with ``skip_locked``) held
    by other consumers. ``async_commit`` adds ``SET LOCAL synchronous_commit = off``: only
    for a statement that is its own transaction.
    """
    bounded = not reserve or config.max_reserved is not None
    params: dict[str, Any] = {"name": name, "key": key, "count": count, "now": now}
    params["period"] = config.period_seconds
    for i, shard in enumerate(candidates):
        share = config.per_shard(shard)
        params[f"shard{i}"] = shard
        params[f"rate{i}"] = share.rate
        params[f"capacity{i}"] = share.max_tokens
        params[f"allowance{i}"] = share.max_reserved if reserve and bounded else 0.0
    statement = _statement(
        isinstance(config, FixedWindow), len(candidates), bounded, skip_locked, async_commit
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        return None
    shard, value, ts, applied, locked = row[:5]
    return Taken(shard, State(value, ts), applied, locked)


def _projection(window: bool) -> tuple[str, str, str]:
    """``(tokens now, new ts, FROM clause)`` over the locked row ``old``: the SQL of
    :func:`.algebra.project` and of the ``ts`` that :func:`.algebra.decide` stores."""
    now, period = "%(now)s::float8", "%(period)s::float8"
    if window:
        windows = f"CASE WHEN {now} > old.ts THEN FLOOR(({now} - old.ts) / {period}) ELSE 0 END"
        return (
            "CASE WHEN w.windows > 0 THEN LEAST(old.value + old.rate * w.windows, old.capacity)"
            " ELSE old.value END",
            f"CASE WHEN w.windows > 0 THEN old.ts + w.windows * {period} ELSE old.ts END",
            f"old CROSS JOIN LATERAL (SELECT {windows} AS windows) w",
        )
    accrued = f"({now} - old.ts) * old.rate / {period}"
    return (
        f"CASE WHEN {now} > old.ts THEN LEAST(old.value + {accrued}, old.capacity)"
        " ELSE old.value END",
        f"GREATEST(old.ts, {now})",
        "old",
    )


@lru_cache(maxsize=64)
def _statement(
    window: bool, candidates: int, bounded: bool, skip_locked: bool, async_commit: bool
) -> str:
    table = f'"{RateLimitState._meta.db_table}"'
    shares = ", ".join(
        f"(%(shard{i})s::smallint, %(rate{i})s::float8, %(capacity{i})s::float8, "
        f"%(allowance{i})s::float8)"
        for i in range(candidates)
    )
    available, since, source = _projection(window)
    # decide(): refused when ``value + allowance < count``; unbounded reservations always fit.
    admits = "available + allowance >= %(count)s::float8" if bounded else "true"
    skip = " SKIP LOCKED" if skip_locked else ""
    relax = ", set_config('synchronous_commit', 'off', true)" if async_commit else ""
    return f"""
WITH share (shard, rate, capacity, allowance) AS (VALUES {shares}),
old AS (
    SELECT r.id, r.shard, r.value, r.ts, share.rate, share.capacity, share.allowance
    FROM {table} r JOIN share ON share.shard = r.shard
    WHERE r.name = %(name)s AND r."key" = %(key)s
    FOR UPDATE OF r{skip}
),
projected AS (
    SELECT old.id, old.shard, old.value, old.ts, old.allowance,
        {available} AS available, {since} AS since
    FROM {source}
),
chosen AS (
    SELECT projected.*, {admits} AS admits FROM projected
    ORDER BY admits DESC, available DESC LIMIT 1
),
taken AS (
    UPDATE {table} r SET value = chosen.available - %(count)s::float8, ts = chosen.since
    FROM chosen WHERE r.id = chosen.id AND chosen.admits
    RETURNING r.id
)
SELECT chosen.shard, chosen.value, chosen.ts, EXISTS (SELECT FROM taken),
    (SELECT count(*) FROM old){relax}
FROM chosen"""

"""A consume on PostgreSQL as one SQL statement: lock, project, decide and write.

The statement states :mod:`.algebra`'s projection in SQL, float8 operation for operation,
so that it admits exactly when :func:`.algebra.decide` would; of two candidate shards it
locks only the better one that no one else holds (``SKIP LOCKED``). docs/concepts.md
("Why it cannot over-admit") tells why it exists and how it is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.db import ServerStatement, sql_to_run
from django_ratequeue.ratelimit.algebra import State
from django_ratequeue.ratelimit.config import FixedWindow, RateLimitConfig
from django_ratequeue.ratelimit.models import RateLimitState


@dataclass(frozen=True, slots=True)
class Taken:
    """What the statement did: the ``shard`` it locked, and what it found and did there.

    ``state`` is that shard's stored state before the consume, ``applied`` whether the
    consume was applied, and, when it was not, ``other_admits`` whether the other
    candidate as last committed would have admitted it."""

    shard: int
    state: State
    applied: bool
    other_admits: bool


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
    async_commit: bool,
    skip_locked: bool = False,
) -> Taken | None:
    """Consume ``count`` from one shard, or from the better of two ``candidates``.

    One candidate is waited for if another transaction holds it, unless ``skip_locked``;
    of two, only one is locked: the better as last committed that no one else holds
    (``SKIP LOCKED``). Return ``None`` when no candidate could be locked: missing, or
    held by others. ``async_commit`` adds ``SET LOCAL synchronous_commit = off``: only
    for a statement that is its own transaction.
    """
    bounded = not reserve or config.max_reserved is not None
    window = isinstance(config, FixedWindow)
    skip = skip_locked and len(candidates) == 1
    shape = _Shape(window, len(candidates), bounded, async_commit, skip)
    params: dict[str, Any] = {"name": name, "key": key, "count": count, "now": now}
    params["period"] = config.period_seconds
    for i, shard in enumerate(candidates):
        share = config.per_shard(shard)
        params[f"shard{i}"] = shard
        params[f"rate{i}"] = share.rate
        params[f"capacity{i}"] = share.max_tokens
        params[f"allowance{i}"] = share.max_reserved if reserve and bounded else 0.0
    with connection.cursor() as cursor:
        cursor.execute(sql_to_run(connection, _server_statement(shape)), params)
        row = cursor.fetchone()
    if row is None:
        return None
    shard, value, ts, applied, other_admits = row[:5]
    return Taken(shard, State(value, ts), applied, other_admits)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the statement's text depends on (its cache key)."""

    window: bool
    candidates: int
    bounded: bool
    async_commit: bool
    # One candidate, skipped if another transaction holds it (two always are).
    skip_locked: bool = False

    @property
    def parameters(self) -> list[tuple[str, str]]:
        """The statement's parameters and their types, in the order ``$1, $2, ...``."""
        shares = [
            (f"{field}{i}", "smallint" if field == "shard" else "float8")
            for i in range(self.candidates)
            for field in ("shard", "rate", "capacity", "allowance")
        ]
        common = [("name", "text"), ("key", "text"), ("count", "float8"), ("now", "float8")]
        return [*common, ("period", "float8"), *shares]

    @property
    def prepared_name(self) -> str:
        flags = (self.window, self.bounded, self.async_commit, self.skip_locked)
        return f"ratequeue_take_{self.candidates}_{''.join(str(int(f)) for f in flags)}"


@lru_cache(maxsize=128)
def _server_statement(shape: _Shape) -> ServerStatement:
    return ServerStatement(
        name=shape.prepared_name,
        text=_statement(shape, prepared=False),
        prepared_text=_statement(shape, prepared=True),
        arguments=", ".join(f"%({name})s" for name, _ in shape.parameters),
        types=", ".join(kind for _, kind in shape.parameters),
    )


# The columns of a shard's share of a limit.
SHARE_FIELDS = ("rate", "capacity", "allowance")


def _one_shard(
    p: dict[str, str], shape: _Shape, table: str, where: str
) -> tuple[str, dict[str, str], str]:
    """Return the CTE that locks the one shard asked for, its share, and ``false`` (no
    other shard admits: none was asked about)."""
    share = {field: p[f"{field}0"] for field in SHARE_FIELDS}
    skip = " SKIP LOCKED" if shape.skip_locked else ""
    locked = f"""old AS (
    SELECT r.id, r.shard, r.value, r.ts FROM {table} r
    WHERE {where} AND r.shard = {p["shard0"]}
    FOR UPDATE{skip}
)"""
    return locked, share, "false"


def _best_shard(
    p: dict[str, str], shape: _Shape, table: str, where: str
) -> tuple[str, dict[str, str], str]:
    """Return the CTEs that lock the better of the candidate shards, its share, and
    whether another candidate would admit.

    Lock only the better candidate as last committed that no one else holds; its newest
    version (``old``) is decided on again by the statement."""
    fields = SHARE_FIELDS
    shares = ", ".join(
        "(" + ", ".join(p[f"{field}{i}"] for field in ("shard", *fields)) + ")"
        for i in range(shape.candidates)
    )
    stored = {field: f"share.{field}" for field in fields}
    available, _, admits = _decision(p, shape, "r.value", "r.ts", stored)
    order = f"{admits} DESC, " if shape.bounded else ""
    candidates = f"""FROM {table} r JOIN share ON share.shard = r.shard
    WHERE {where} AND r.shard IN ({", ".join(p[f"shard{i}"] for i in range(shape.candidates))})"""
    locked = f"""share (shard, {", ".join(fields)}) AS (VALUES {shares}),
old AS (
    SELECT r.id, r.shard, r.value, r.ts, share.rate, share.capacity, share.allowance
    {candidates}
    ORDER BY {order}{available} DESC
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
)"""
    share = {field: f"old.{field}" for field in fields}
    other_admits = f"""CASE WHEN chosen.admits THEN false ELSE EXISTS (
    SELECT {candidates} AND r.shard <> chosen.shard AND {admits}
) END"""
    return locked, share, other_admits


def _decision(
    p: dict[str, str], shape: _Shape, value: str, ts: str, share: dict[str, str]
) -> tuple[str, str, str]:
    """Return SQL for the row ``(value, ts)``: its tokens now, new ``ts`` and whether it admits.

    The row is under the shard's ``share`` (rate, capacity, allowance) and asked for
    ``count``; the expressions are the operations of :func:`.algebra.project` and
    :func:`.algebra.decide`, in their order."""
    now, period, count = p["now"], p["period"], p["count"]
    rate, capacity = share["rate"], share["capacity"]
    if shape.window:
        windows = f"CASE WHEN {now} > {ts} THEN FLOOR(({now} - {ts}) / {period}) ELSE 0 END"
        available = (
            f"CASE WHEN {windows} > 0 THEN LEAST({value} + {rate} * {windows}, {capacity})"
            f" ELSE LEAST({value}, {capacity}) END"
        )
        since = f"CASE WHEN {windows} > 0 THEN {ts} + {windows} * {period} ELSE {ts} END"
    else:
        accrued = f"({now} - {ts}) * {rate} / {period}"
        available = (
            f"CASE WHEN {now} > {ts} THEN LEAST({value} + {accrued}, {capacity})"
            f" ELSE LEAST({value}, {capacity}) END"
        )
        since = f"GREATEST({ts}, {now})"
    # decide(): refused when ``value + allowance < count``; unbounded reservations always fit.
    admits = f"{available} + {share['allowance']} >= {count}" if shape.bounded else "true"
    return available, since, admits


@lru_cache(maxsize=128)
def _statement(shape: _Shape, *, prepared: bool) -> str:
    """Return the statement's text, with placeholders for ``PREPARE`` or for the driver.

    They are ``$n`` for ``PREPARE``, typed ``%(name)s`` ones for the driver."""
    p = {
        name: f"${i}" if prepared else f"%({name})s::{kind}"
        for i, (name, kind) in enumerate(shape.parameters, start=1)
    }
    table = f'"{RateLimitState._meta.db_table}"'
    where = f'r.name = {p["name"]} AND r."key" = {p["key"]}'
    if shape.candidates == 1:
        locked, share, other_admits = _one_shard(p, shape, table, where)
    else:
        locked, share, other_admits = _best_shard(p, shape, table, where)
    available, since, admits = _decision(p, shape, "old.value", "old.ts", share)
    relax = ", set_config('synchronous_commit', 'off', true)" if shape.async_commit else ""
    return f"""
WITH {locked},
chosen AS (
    SELECT old.id, old.shard, old.value, old.ts,
        {available} AS available, {since} AS since, {admits} AS admits
    FROM old
),
taken AS (
    UPDATE {table} r SET value = chosen.available - {p["count"]}, ts = chosen.since
    FROM chosen WHERE r.id = chosen.id AND chosen.admits
    RETURNING r.id
)
SELECT chosen.shard, chosen.value, chosen.ts, EXISTS (SELECT FROM taken), {other_admits}{relax}
FROM chosen"""

"""Reading, locking and writing the rows of :class:`RateLimitState` with few round trips.

The hot path of a consume is one ``SELECT ... FOR UPDATE`` and one ``UPDATE`` by primary
key (or one ``INSERT`` for a new row), in raw SQL because the ORM's per-query overhead is
a large share of a decision. Callers hold a transaction; on SQLite the write lock is taken
at ``BEGIN`` (``transaction_mode="IMMEDIATE"``), where ``FOR UPDATE`` is not needed.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from .algebra import State
from .models import RateLimitState


def connection_for_write() -> BaseDatabaseWrapper:
    return connections[router.db_for_write(RateLimitState)]


_STATEMENTS: dict[str, dict[str, str]] = {}


def _sql(connection: BaseDatabaseWrapper, statement: str) -> str:
    """The SQL of ``statement`` for ``connection``'s database, built once per alias."""
    try:
        return _STATEMENTS[connection.alias][statement]
    except KeyError:
        pass
    q = connection.ops.quote_name
    t, key = q(RateLimitState._meta.db_table), q("key")
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    relax = ""
    if connection.vendor == "postgresql":
        # SET LOCAL synchronous_commit = off, without a round trip of its own.
        relax = ", set_config('synchronous_commit', 'off', true)"
    where = f"name = %s AND {key} = %s"
    _STATEMENTS[connection.alias] = {
        "lock": f"SELECT id, value, ts FROM {t} WHERE {where} AND shard = %s{lock}",
        "lock_relaxed": f"SELECT id, value, ts{relax} FROM {t} WHERE {where} AND shard = %s{lock}",
        "read_all": f"SELECT shard, value, ts FROM {t} WHERE {where}",
        "read_one": f"SELECT shard, value, ts FROM {t} WHERE {where} AND shard = %s",
        "read_two": f"SELECT shard, value, ts FROM {t} WHERE {where} AND shard IN (%s, %s)",
        "insert": (
            f"INSERT INTO {t} (name, {key}, shard, value, ts) VALUES (%s, %s, %s, %s, %s) "
            f"ON CONFLICT (name, {key}, shard) DO NOTHING"
        ),
        "update": f"UPDATE {t} SET value = %s, ts = %s WHERE id = %s",
        "delete": f"DELETE FROM {t} WHERE {where}",
    }
    return _STATEMENTS[connection.alias][statement]


def lock_row(
    connection: BaseDatabaseWrapper, name: str, key: str, shard: int, *, relaxed_commit: bool
) -> tuple[int, State] | None:
    """Lock the row and return its id and state, or ``None`` if there is no row yet.

    ``relaxed_commit`` (only for a transaction that holds nothing but this decision) lets
    PostgreSQL commit without waiting for the WAL flush, the largest cost of a decision.
    Rate-limit state is soft: a database crash can then forget the consumes of its last
    fraction of a second, never corrupt a row, and nothing else is made less durable.
    """
    statement = "lock_relaxed" if relaxed_commit else "lock"
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, statement), [name, key, shard])
        row = cursor.fetchone()
    return None if row is None else (row[0], State(row[1], row[2]))


def insert_row(
    connection: BaseDatabaseWrapper, name: str, key: str, shard: int, state: State
) -> bool:
    """Create the row; ``False`` if another transaction created it first (it then waits
    for that transaction on PostgreSQL, so that the caller can lock the row)."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, "insert"), [name, key, shard, state.value, state.ts])
        return cursor.rowcount == 1


def update_row(connection: BaseDatabaseWrapper, row_id: int, state: State) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, "update"), [state.value, state.ts, row_id])


def read_rows(
    connection: BaseDatabaseWrapper, name: str, key: str, shards: Iterable[int] | None = None
) -> dict[int, State]:
    """The stored states by shard (all, or one or two given ones), without locking."""
    with connection.cursor() as cursor:
        if shards is None:
            cursor.execute(_sql(connection, "read_all"), [name, key])
        else:
            wanted = sorted(set(shards))
            statement = "read_one" if len(wanted) == 1 else "read_two"
            cursor.execute(_sql(connection, statement), [name, key, *wanted])
        return {shard: State(value, ts) for shard, value, ts in cursor.fetchall()}


def delete_rows(connection: BaseDatabaseWrapper, name: str, key: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, "delete"), [name, key])
        return cursor.rowcount

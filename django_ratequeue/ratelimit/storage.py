"""Reading, locking and writing the rows of :class:`RateLimitState` with few round trips.

Off PostgreSQL (which consumes in one statement, :mod:`.sql`) a consume is one
``SELECT ... FOR UPDATE`` and one ``UPDATE`` by primary key, in raw SQL. Callers hold a
transaction; on SQLite its write lock is taken at ``BEGIN``
(``transaction_mode="IMMEDIATE"``), where ``FOR UPDATE`` is not needed. docs/concepts.md
("Why it cannot over-admit") tells why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.ratelimit.algebra import State
from django_ratequeue.ratelimit.models import RateLimitState


def rate_limit_db() -> str:
    """Return the database alias the rate limits' rows live on, as the project's routers say."""
    return router.db_for_write(RateLimitState)


def connection_for_write() -> BaseDatabaseWrapper:
    return connections[rate_limit_db()]


_STATEMENTS: dict[str, dict[str, str]] = {}


def _sql(connection: BaseDatabaseWrapper, statement: str) -> str:
    """Return the SQL of ``statement`` for ``connection``'s database, built once per alias."""
    try:
        return _STATEMENTS[connection.alias][statement]
    except KeyError:
        pass
    q = connection.ops.quote_name
    t, key = q(RateLimitState._meta.db_table), q("key")
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    where = f"name = %s AND {key} = %s"
    _STATEMENTS[connection.alias] = {
        "lock": f"SELECT id, value, ts FROM {t} WHERE {where} AND shard = %s{lock}",
        "read_all": f"SELECT shard, value, ts FROM {t} WHERE {where}",
        "read_one": f"SELECT shard, value, ts FROM {t} WHERE {where} AND shard = %s",
        "read_two": f"SELECT shard, value, ts FROM {t} WHERE {where} AND shard IN (%s, %s)",
        "insert": f"INSERT INTO {t} (name, {key}, shard, value, ts) VALUES ",
        "on_conflict": f" ON CONFLICT (name, {key}, shard) DO NOTHING",
        "update": f"UPDATE {t} SET value = %s, ts = %s WHERE id = %s",
        "delete": f"DELETE FROM {t} WHERE {where}",
        "delete_all": f"DELETE FROM {t} WHERE name = %s",
    }
    return _STATEMENTS[connection.alias][statement]


def lock_row(
    connection: BaseDatabaseWrapper, name: str, key: str, shard: int
) -> tuple[int, State] | None:
    """Lock the row and return its id and state, or ``None`` if there is no row yet."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, "lock"), [name, key, shard])
        row = cursor.fetchone()
    return None if row is None else (row[0], State(row[1], row[2]))


def insert_rows(
    connection: BaseDatabaseWrapper, name: str, key: str, states: Mapping[int, State]
) -> int:
    """Create the rows of the given shards; return how many did not exist yet.

    For a row created by another transaction, PostgreSQL waits for it, so the caller can
    lock it."""
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(states))
    params = [
        part
        for shard, state in states.items()
        for part in (name, key, shard, state.value, state.ts)
    ]
    statement = _sql(connection, "insert") + values + _sql(connection, "on_conflict")
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.rowcount


def update_row(connection: BaseDatabaseWrapper, row_id: int, state: State) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, "update"), [state.value, state.ts, row_id])


def read_rows(
    connection: BaseDatabaseWrapper, name: str, key: str, shards: Iterable[int] | None = None
) -> dict[int, State]:
    """Return the stored states by shard (all, or one or two given ones), without locking."""
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


def delete_all_rows(connection: BaseDatabaseWrapper, name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection, "delete_all"), [name])
        return cursor.rowcount

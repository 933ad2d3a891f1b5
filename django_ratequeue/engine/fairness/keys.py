"""Fair dispatch across concurrency keys: which keys of a queue have work ready, in turn.

Both read the dispatch index ``(status, queue, concurrency_key, *READY_ORDER)``: the keys
by skipping through it (:func:`keys_in_turn`), each key's next jobs as the head of its
range (:func:`next_jobs`). docs/concepts.md ("The main loop") tells how keys take turns.
"""

from __future__ import annotations

from typing import Any

from django_ratequeue.db import execute, server_statement
from django_ratequeue.engine.models import READY_ORDER, Job, Status, queue_connection

# Fields the loop needs to decide on and start a job.
CANDIDATE_FIELDS = (
    "queue",
    "priority",
    "created_at",
    "start_at",
    "concurrency_key",
    "max_concurrency",
    "timeout",
    "attempts",
    "cost",
    "tokens_reserved",
)


def keys_in_turn(queue: str, cursor: str | None, limit: int) -> list[str]:
    """Return up to ``limit`` keys of ``queue`` with work ready, in turn after ``cursor``.

    ``cursor`` is the key served last; the keys wrap around after the last one, and ``""``
    is the key of jobs without one. Found by skipping through the dispatch index, both
    ranges in one statement."""
    connection = queue_connection()
    table = connection.ops.quote_name(Job._meta.db_table)
    where = f"status = '{Status.WAITING.value}' AND queue = %s"
    first = ">= %s" if cursor is None else "> %s"
    sql = (
        f"WITH RECURSIVE k(key, n) AS ("
        f" SELECT MIN(concurrency_key), 1 FROM {table} WHERE {where} AND concurrency_key {first}"
        f" UNION ALL"
        f" SELECT (SELECT MIN(concurrency_key) FROM {table} WHERE {where}"
        f" AND concurrency_key > k.key), k.n + 1"
        f" FROM k WHERE k.key IS NOT NULL AND k.n < %s"
        f"), w(key, n) AS ("  # the wrap-around: from the first key up to the cursor
        f" SELECT MIN(concurrency_key), 1 FROM {table} WHERE {where} AND concurrency_key <= %s"
        f" AND %s > 0 UNION ALL"
        f" SELECT (SELECT MIN(concurrency_key) FROM {table} WHERE {where}"
        f" AND concurrency_key > w.key AND concurrency_key <= %s), w.n + 1"
        f" FROM w WHERE w.key IS NOT NULL AND w.n < %s"
        f") SELECT 1, key FROM k WHERE key IS NOT NULL"
        f" UNION ALL SELECT 2, key FROM w WHERE key IS NOT NULL"
        f" ORDER BY 1, 2"
    )
    # Without a cursor, every key comes in the first range, "" (no key) included.
    after, wrap = ("", 0) if cursor is None else (cursor, limit)
    params = [queue, after, queue, limit, queue, after, wrap, queue, after, wrap]
    name = f"ratequeue_keys_{'first' if cursor is None else 'after'}"
    rows = execute(connection, server_statement(name, sql), params)
    return [key for _part, key in rows][:limit]


def ready_order(table: str = "") -> str:
    """Return :data:`READY_ORDER` as the list of an SQL ``ORDER BY`` (of ``table``'s columns)."""
    quote = queue_connection().ops.quote_name
    prefix = f"{table}." if table else ""
    return ", ".join(
        f"{prefix}{quote(name.lstrip('-'))}{' DESC' if name.startswith('-') else ''}"
        for name in READY_ORDER
    )


def ready_key(job: Job) -> tuple[Any, ...]:
    """Return :data:`READY_ORDER` as the sort key of a job read (``-True`` sorts first)."""
    return tuple(
        -getattr(job, name[1:]) if name.startswith("-") else getattr(job, name)
        for name in READY_ORDER
    )


def next_jobs(queue: str, takes: dict[str, int]) -> list[Job]:
    """Return the next ``takes[key]`` WAITING jobs of each key, in the order they start.

    That order is :data:`READY_ORDER`: one bounded index range per key, all in one
    statement."""
    connection = queue_connection()
    table = connection.ops.quote_name(Job._meta.db_table)
    # Plain fields: their columns are their names.
    columns = ", ".join(connection.ops.quote_name(name) for name in ("id", *CANDIDATE_FIELDS))
    order = ready_order()
    parts: list[str] = []
    params: list[str | int] = []
    for position, (key, take) in enumerate(takes.items()):
        if take <= 0:
            continue
        parts.append(
            f"SELECT * FROM (SELECT {columns} FROM {table}"
            f" WHERE status = '{Status.WAITING.value}' AND queue = %s AND concurrency_key = %s"
            f" ORDER BY {order} LIMIT %s) AS key{position}"
        )
        params += [queue, key, take]
    if not parts:
        return []
    return list(Job.objects.raw(" UNION ALL ".join(parts), params))

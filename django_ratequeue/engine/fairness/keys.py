"""Fair dispatch across concurrency keys: which keys of the queues have work ready, in turn.

Both read the dispatch index ``(status, queue, concurrency_key, *READY_ORDER)``: the keys
by skipping through it (:func:`keys_in_turn`), each key's next jobs as the head of its
range (:func:`next_jobs`); each for many queues in one statement, so that a step's reads
do not grow with the queues that wait. docs/concepts.md ("The main loop") tells how keys
take turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_ratequeue.db import execute, server_statement, sql_to_run
from django_ratequeue.engine.fairness import waitingsql
from django_ratequeue.engine.models import READY_ORDER, Job, queue_connection

# Fields the loop needs to decide on and start a job, and to choose the runner to wake.
CANDIDATE_FIELDS = (
    "func",
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


# The most parts one statement unions on SQLite (it refuses a compound SELECT beyond 500).
PARTS_PER_STATEMENT = 200


def keys_in_turn(wanted: Mapping[str, tuple[str | None, int]]) -> dict[str, list[str]]:
    """Return, per queue, up to ``limit`` keys with work ready, in turn after ``cursor``.

    ``wanted`` gives each queue its ``(cursor, limit)``: ``cursor`` is the key served last
    (None: none yet); the keys wrap around after the last one, and ``""`` is the key of
    jobs without one. Found by skipping through the dispatch index, every queue's two
    ranges in one statement (:mod:`.waitingsql`)."""
    queues = list(wanted)
    # Without a cursor, every key comes in the first range, "" (no key) included.
    ranges = [
        (queue, cursor or "", cursor is not None, limit, 0 if cursor is None else limit)
        for queue, (cursor, limit) in wanted.items()
    ]
    connection = queue_connection()
    rows: list[tuple[Any, ...]] = []
    if connection.vendor == "postgresql" and ranges:
        arrays = [list(column) for column in zip(*ranges, strict=True)]
        statement = server_statement("ratequeue_keys", waitingsql.lateral_keys())
        rows = execute(connection, statement, arrays)
    else:
        step = PARTS_PER_STATEMENT // 2
        for start in range(0, len(ranges), step):
            chunk = ranges[start : start + step]
            params = [
                p
                for q, after, _s, limit, wrap in chunk
                for p in waitingsql.union_keys_params(q, after, limit, wrap)
            ]
            sql = waitingsql.union_keys([strict for _q, _a, strict, _l, _w in chunk])
            rows += [(start + ord_, part, key) for ord_, part, key in raw_rows(sql, params)]
    found: dict[str, list[str]] = {queue: [] for queue in queues}
    for ord_, _part, key in rows:
        found[queues[ord_ - 1]].append(key)
    return {queue: keys[: wanted[queue][1]] for queue, keys in found.items()}


def raw_rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Return the rows of ``sql`` on the queue's database."""
    with queue_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


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


def next_jobs(takes: Mapping[tuple[str, str], int]) -> list[Job]:
    """Return the next ``takes[(queue, key)]`` WAITING jobs of each key of each queue.

    In the order they start, :data:`READY_ORDER`: one bounded index range per key, all
    in one statement (:mod:`.waitingsql`)."""
    wanted = [(queue, key, take) for (queue, key), take in takes.items() if take > 0]
    if not wanted:
        return []
    connection = queue_connection()
    # Plain fields: their columns are their names.
    columns = ", ".join(connection.ops.quote_name(name) for name in ("id", *CANDIDATE_FIELDS))
    if connection.vendor == "postgresql":
        arrays = [list(column) for column in zip(*wanted, strict=True)]
        statement = server_statement(
            "ratequeue_next_jobs", waitingsql.lateral_heads(columns, ready_order())
        )
        return list(Job.objects.raw(sql_to_run(connection, statement), arrays))
    jobs: list[Job] = []
    for start in range(0, len(wanted), PARTS_PER_STATEMENT):
        chunk = wanted[start : start + PARTS_PER_STATEMENT]
        sql = waitingsql.union_heads(columns, ready_order(), len(chunk))
        jobs += Job.objects.raw(sql, [p for part in chunk for p in part])
    return jobs

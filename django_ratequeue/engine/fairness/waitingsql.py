"""The statements that read the waiting jobs' keys and heads for many queues at once.

Both skip through the dispatch index ``(status, queue, concurrency_key, *READY_ORDER)``
once per queue (and per key): on PostgreSQL a ``LATERAL`` join over arrays of the
queues, one text whatever their number, prepared on the server; on SQLite, which has no
``LATERAL`` and runs in the process, a ``UNION ALL`` of one part per queue (or key).
:mod:`.keys` runs them.
"""

from __future__ import annotations

from django_ratequeue.engine.models import Job, Status, queue_connection

WAITING = f"status = '{Status.WAITING.value}'"


def table() -> str:
    return queue_connection().ops.quote_name(Job._meta.db_table)


def lateral_keys() -> str:
    """Return the keys in turn of the queues of arrays (queue, after, strict, limit, wrap).

    Per queue (its ``ord``inal), part 1 holds up to ``limit`` keys after ``after`` (from
    it, unless ``strict``), part 2 the wrap-around: up to ``wrap`` keys up to ``after``."""
    t, where = table(), f"{WAITING} AND queue = q.queue"
    first = f"SELECT MIN(concurrency_key) FROM {t} WHERE {where} AND concurrency_key"
    return (
        "SELECT q.ord, s.part, s.key FROM unnest(%s::text[], %s::text[], %s::boolean[],"
        " %s::int[], %s::int[]) WITH ORDINALITY AS q(queue, after, strict, lim, wrap, ord)"
        " CROSS JOIN LATERAL (WITH RECURSIVE k(key, n) AS ("
        f" SELECT CASE WHEN q.strict THEN ({first} > q.after) ELSE ({first} >= q.after)"
        " END, 1 UNION ALL"
        f" SELECT (SELECT MIN(concurrency_key) FROM {t} WHERE {where}"
        " AND concurrency_key > k.key), k.n + 1 FROM k WHERE k.key IS NOT NULL AND k.n < q.lim"
        "), w(key, n) AS ("
        f" SELECT (SELECT MIN(concurrency_key) FROM {t} WHERE {where}"
        " AND concurrency_key <= q.after), 1 WHERE q.wrap > 0 UNION ALL"
        f" SELECT (SELECT MIN(concurrency_key) FROM {t} WHERE {where}"
        " AND concurrency_key > w.key AND concurrency_key <= q.after), w.n + 1"
        " FROM w WHERE w.key IS NOT NULL AND w.n < q.wrap"
        ") SELECT 1 AS part, key FROM k WHERE key IS NOT NULL"
        " UNION ALL SELECT 2, key FROM w WHERE key IS NOT NULL) AS s"
        " ORDER BY 1, 2, 3"
    )


def union_keys(strict: list[bool]) -> str:
    """Return :func:`lateral_keys` as a union, one part per queue (``strict`` gives each's).

    Its parameters: per queue (queue, after, limit, wrap)."""
    t, where = table(), f"{WAITING} AND queue = %s"
    ranges, selects = [], []
    for ord_, after_it in enumerate(strict, start=1):
        k, w = f"k{ord_}", f"w{ord_}"
        ranges.append(
            f"{k}(key, n) AS ("
            f" SELECT MIN(concurrency_key), 1 FROM {t} WHERE {where}"
            f" AND concurrency_key {'>' if after_it else '>='} %s UNION ALL"
            f" SELECT (SELECT MIN(concurrency_key) FROM {t} WHERE {where}"
            f" AND concurrency_key > {k}.key), {k}.n + 1"
            f" FROM {k} WHERE {k}.key IS NOT NULL AND {k}.n < %s"
            f"), {w}(key, n) AS ("
            f" SELECT MIN(concurrency_key), 1 FROM {t} WHERE {where}"
            f" AND concurrency_key <= %s AND %s > 0 UNION ALL"
            f" SELECT (SELECT MIN(concurrency_key) FROM {t} WHERE {where}"
            f" AND concurrency_key > {w}.key AND concurrency_key <= %s), {w}.n + 1"
            f" FROM {w} WHERE {w}.key IS NOT NULL AND {w}.n < %s)"
        )
        selects.append(
            f"SELECT {ord_}, 1, key FROM {k} WHERE key IS NOT NULL"
            f" UNION ALL SELECT {ord_}, 2, key FROM {w} WHERE key IS NOT NULL"
        )
    return f"WITH RECURSIVE {', '.join(ranges)} {' UNION ALL '.join(selects)} ORDER BY 1, 2, 3"


def union_keys_params(queue: str, after: str, limit: int, wrap: int) -> list[str | int]:
    """Return one queue's parameters of :func:`union_keys`, in their order."""
    return [queue, after, queue, limit, queue, after, wrap, queue, after, wrap]


def lateral_heads(columns: str, order: str) -> str:
    """Return the next ``take`` waiting jobs of each key, from arrays (queue, key, take)."""
    return (
        f"SELECT j.* FROM unnest(%s::text[], %s::text[], %s::int[]) AS c(queue, key, take)"
        f" CROSS JOIN LATERAL (SELECT {columns} FROM {table()} WHERE {WAITING}"
        f" AND queue = c.queue AND concurrency_key = c.key ORDER BY {order} LIMIT c.take) AS j"
    )


def union_heads(columns: str, order: str, count: int) -> str:
    """Return :func:`lateral_heads` as a union of ``count`` parts, each (queue, key, take)."""
    part = (
        f"SELECT * FROM (SELECT {columns} FROM {table()} WHERE {WAITING}"
        f" AND queue = %s AND concurrency_key = %s ORDER BY {order} LIMIT %s) AS key{{n}}"
    )
    return " UNION ALL ".join(part.format(n=n) for n in range(count))

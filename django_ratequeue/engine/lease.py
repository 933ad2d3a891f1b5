"""The leader's lease on the loop, renewed by the first statement of every step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.db import PLANNED_ON_INDEXES, ServerStatement, execute, statement_of
from django_ratequeue.engine.heads import LeaseHead, lease_heads
from django_ratequeue.engine.models import LoopState, queue_connection
from django_ratequeue.engine.wakeup import lease_end

# What a step's transaction tells PostgreSQL (docs/concepts.md, "The main loop"):
# commit without waiting for the WAL flush, and plan as the engine's hot statements are
# (each prepared statement once: not again for the arrays of queues a read takes).
STEP_SETTINGS = (("synchronous_commit", "off"), *PLANNED_ON_INDEXES)


@dataclass(frozen=True)
class Renewal:
    """What a step's lease renewal read: the value of each lease head, by name.

    A head reads as an attribute too (``renewal.next_deferred``); :mod:`.heads` tells
    which heads there are."""

    heads: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        """Return the value of the lease head ``name``."""
        if name != "heads" and name in self.heads:
            return self.heads[name]
        raise AttributeError(f"The renewal read no lease head named {name!r}.")


class Lease:
    """Renew the lease of ``generation`` step by step, reading the lease heads."""

    def __init__(self, generation: int) -> None:
        self.generation = generation

    def renew(self, now: datetime) -> Renewal | None:
        """Renew the lease in the step's transaction; None if another process took it."""
        heads = renew_lease(self.generation, now)
        return None if heads is None else Renewal(heads)


def renew_lease(generation: int, now: datetime) -> dict[str, Any] | None:
    """Renew the lease of ``generation``; return what the lease heads read, by name.

    Return None if another process took the lease. One statement: each registered head
    adds its columns to the UPDATE's RETURNING (each read through an index); on
    PostgreSQL it also applies :data:`STEP_SETTINGS` to the step's transaction."""
    connection = queue_connection()
    heads = tuple(lease_heads())
    statement, widths = renewal_statement(connection, heads)
    adapt = connection.ops.adapt_datetimefield_value
    params = [adapt(lease_end(now)), adapt(now), LoopState.SINGLETON, generation]
    rows = execute(connection, statement, params)
    if not rows:
        return None
    values, read = rows[0][1:], {}
    for head, width in zip(heads, widths, strict=True):
        read[head.name], values = head.decode(values[:width]), values[width:]
    return read


# The renewal's statement and each head's number of columns, per database and heads.
_statements: dict[tuple[str, tuple[LeaseHead, ...]], tuple[ServerStatement, list[int]]] = {}


def renewal_statement(
    connection: BaseDatabaseWrapper, heads: tuple[LeaseHead, ...]
) -> tuple[ServerStatement, list[int]]:
    """Return the renewal's statement with the columns of ``heads``, built once."""
    key = (connection.alias, heads)
    if key not in _statements:
        table = connection.ops.quote_name(LoopState._meta.db_table)
        columns = [list(head.columns(connection)) for head in heads]
        returning = ["1", *(f"({sql})" for sqls in columns for sql in sqls)]
        if connection.vendor == "postgresql":
            settings = [f"set_config('{name}', '{value}', true)" for name, value in STEP_SETTINGS]
            returning += settings
        sql = (
            f"UPDATE {table} SET lease_expires_at = %s, updated_at = %s"
            f" WHERE id = %s AND generation = %s RETURNING {', '.join(returning)}"
        )
        # Named by its text: a head registered later makes another statement, not a stale one.
        statement = statement_of("ratequeue_renew_lease", sql)
        _statements[key] = (statement, [len(sqls) for sqls in columns])
    return _statements[key]

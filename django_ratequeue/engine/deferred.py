"""Read the earliest start of the deferred jobs (SCHEDULED and RETRYING)."""

from __future__ import annotations

from datetime import datetime

from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.db import execute, server_statement
from django_ratequeue.engine.heads import LeaseHead, aware, earliest, register_lease_head
from django_ratequeue.engine.models import DEFERRED_STATUSES, Job, queue_connection


def deferred_heads(connection: BaseDatabaseWrapper | None = None) -> list[str]:
    """Return, per deferred status, the SQL that reads its earliest start (by its index)."""
    table = (connection or queue_connection()).ops.quote_name(Job._meta.db_table)
    return [
        f"SELECT start_at FROM {table} WHERE status = '{status.value}' ORDER BY start_at LIMIT 1"
        for status in DEFERRED_STATUSES
    ]


def next_deferred_start() -> datetime | None:
    """Return the earliest start of a SCHEDULED or RETRYING job, if any, in one statement."""
    connection = queue_connection()
    sql = " UNION ALL ".join(
        f"SELECT * FROM ({head}) AS h{n}" for n, head in enumerate(deferred_heads())
    )
    statement = server_statement(
        "ratequeue_next_deferred", f"SELECT MIN(start_at) FROM ({sql}) AS d"
    )
    ((start,),) = execute(connection, statement, [])
    return None if start is None else aware(start)


# The earliest start of a SCHEDULED or RETRYING job (None: there is none).
register_lease_head(LeaseHead("next_deferred", deferred_heads, earliest))

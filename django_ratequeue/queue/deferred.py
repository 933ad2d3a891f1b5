"""Read the earliest start of the deferred jobs (SCHEDULED and RETRYING)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..db import execute, server_statement
from .models import DEFERRED_STATUSES, Job, queue_connection


def deferred_heads() -> list[str]:
    """Return, per deferred status, the SQL that reads its earliest start (by its index)."""
    table = queue_connection().ops.quote_name(Job._meta.db_table)
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


def aware(value: datetime | str) -> datetime:
    """Return a datetime column read with raw SQL as an aware datetime.

    SQLite gives naive UTC, or text where a UNION hides the column's type."""
    moment = parse_datetime(value) if isinstance(value, str) else value
    assert moment is not None
    return moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment

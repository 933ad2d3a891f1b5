"""Writing rows without the ORM's per-object overhead, where the loop and enqueue need it.

Updating many rows, each with its own values, in one statement:
Django's ``bulk_update`` builds a ``CASE`` per field that grows with the rows squared in
work for the database; the loop and the runner write a hundred outcomes at a time, so they
use ``UPDATE ... FROM (VALUES ...)`` instead (PostgreSQL, and SQLite 3.33+). Inserting many
rows with ``COPY``, and one row with a server-side prepared ``INSERT``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, JSONField, Model

from ..db import ServerStatement, sql_to_run

CHUNK = 200


def update_rows(
    model: type[Model], objects: Sequence[Model], fields: Sequence[str], condition: str = ""
) -> int:
    """Write ``fields`` of each object to its row; ``condition`` is extra SQL on the target
    table (aliased ``t``), e.g. ``"t.ended_at IS NULL"``. Returns the rows changed."""
    if not objects:
        return 0
    quote = connection.ops.quote_name
    meta = model._meta
    by_name = {field.name: field for field in meta.concrete_fields}
    assert meta.pk is not None
    columns: list[Field[Any, Any]] = [meta.pk, *(by_name[name] for name in fields)]
    is_postgres = connection.vendor == "postgresql"
    names = [f"c{i}" for i in range(len(columns))]
    if is_postgres:
        placeholder = "(" + ", ".join(f"%s::{f.db_type(connection)}" for f in columns) + ")"
        source = "(VALUES {rows}) AS v(" + ", ".join(names) + ")"
    else:
        placeholder = "(" + ", ".join(["%s"] * len(columns)) + ")"
        source = "(VALUES {rows}) AS v"
        names = [f"column{i + 1}" for i in range(len(columns))]
    assignments = ", ".join(
        f"{quote(str(field.column))} = v.{name}"
        for field, name in zip(columns[1:], names[1:], strict=True)
    )
    where = f"t.{quote(str(columns[0].column))} = v.{names[0]}"
    if condition:
        where += f" AND {condition}"
    changed = 0
    for start in range(0, len(objects), CHUNK):
        chunk = objects[start : start + CHUNK]
        params: list[Any] = []
        for obj in chunk:
            for field in columns:
                value = getattr(obj, field.attname)
                params.append(field.get_db_prep_save(value, connection))
        rows = ", ".join([placeholder] * len(chunk))
        sql = (
            f"UPDATE {quote(meta.db_table)} AS t SET {assignments} "
            f"FROM {source.format(rows=rows)} WHERE {where}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            changed += cursor.rowcount
    return changed


def insert_rows(model: type[Model], objects: Sequence[Model]) -> None:
    """INSERT many new rows: with COPY on PostgreSQL (several times faster than a multi-row
    INSERT for tens of thousands of jobs), with ``bulk_create`` elsewhere."""
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(objects, batch_size=1000)
        return
    fields = list(model._meta.concrete_fields)
    as_json = [isinstance(field, JSONField) for field in fields]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in fields)
    sql = f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for obj in objects:
            row = []
            for field, is_json in zip(fields, as_json, strict=True):
                value = getattr(obj, field.attname)
                row.append(json.dumps(value) if is_json and value is not None else value)
            copy.write_row(row)


def insert_row(obj: Model, async_commit: bool = False) -> None:
    """INSERT one new row with a plain statement that a PostgreSQL session prepares from its
    second use: a single enqueue's hot path, where ``save()`` costs more than the INSERT.

    ``async_commit`` (PostgreSQL, outside a transaction only) commits the row without
    waiting for the WAL flush: ``synchronous_commit`` is read at commit, so the statement
    turns it off for its own transaction in its ``RETURNING``.
    """
    fields = obj._meta.concrete_fields
    params = [field.get_db_prep_save(getattr(obj, field.attname), connection) for field in fields]
    relax = async_commit and connection.vendor == "postgresql" and not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute(sql_to_run(connection, _insert_statement(type(obj), relax)), params)


@cache
def _insert_statement(model: type[Model], async_commit: bool) -> ServerStatement:
    quote = connection.ops.quote_name
    fields = model._meta.concrete_fields
    columns = ", ".join(quote(str(field.column)) for field in fields)
    insert = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES "
    placeholders = ", ".join(["%s"] * len(fields))
    numbered = ", ".join(f"${i}" for i in range(1, len(fields) + 1))
    relax = " RETURNING set_config('synchronous_commit', 'off', true)" if async_commit else ""
    return ServerStatement(
        name=f"ratequeue_insert_{model._meta.db_table}{'_async' if async_commit else ''}",
        text=f"{insert}({placeholders}){relax}",
        prepared_text=f"{insert}({numbered}){relax}",
        arguments=placeholders,
    )

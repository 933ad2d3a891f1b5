"""Updating many rows, each with its own values, in one statement.

Django's ``bulk_update`` builds a ``CASE`` per field that grows with the rows squared in
work for the database; the loop and the runner write a hundred outcomes at a time, so they
use ``UPDATE ... FROM (VALUES ...)`` instead (PostgreSQL, and SQLite 3.33+).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, JSONField, Model

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

"""Row writes without the ORM's per-object overhead, where the loop and enqueue need them.

Many rows, each with its own values, in one UPDATE (:func:`update_rows`) or one INSERT
(:func:`insert_rows`); many new rows alike but for a few columns with ``COPY``
(:class:`RowCopy`); one row with a server-side prepared ``INSERT`` (:class:`RowInsert`).
docs/concepts.md ("The main loop") tells why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, JSONField, Model

from django_ratequeue.db import ServerStatement, sql_to_run, statement_of

CHUNK = 200


def _connection(model: type[Model]) -> BaseDatabaseWrapper:
    """Return the connection ``model``'s rows are written on, as the project's routers say."""
    return connections[router.db_for_write(model)]


def update_rows(
    model: type[Model],
    objects: Sequence[Model],
    fields: Sequence[str],
    condition: str = "",
    returning: str = "",
    condition_params: Sequence[Any] = (),
    prepared_as: str = "",
    session_settings: tuple[tuple[str, str], ...] = (),
) -> int:
    """Write ``fields`` of each object to its row, and return the rows changed.

    ``condition`` is extra SQL on the target table (aliased ``t``), e.g.
    ``"t.ended_at IS NULL"``, with ``condition_params`` for its placeholders; ``returning``
    an expression evaluated per row changed (a signal). With ``prepared_as``, the
    statement (on PostgreSQL the same text for any number of rows) is the session's
    prepared statement of that name, planned under ``session_settings`` (:mod:`..db`);
    only for a caller that plans on indexes (a loop step, a runner)."""
    if not objects:
        return 0
    connection = _connection(model)
    quote = connection.ops.quote_name
    meta = model._meta
    by_name = {field.name: field for field in meta.concrete_fields}
    assert meta.pk is not None
    columns: list[Field[Any, Any]] = [meta.pk, *(by_name[name] for name in fields)]
    names = _source_names(connection, len(columns))
    # On PostgreSQL one statement takes any number of rows; a VALUES list CHUNK at most.
    size = len(objects) if connection.vendor == "postgresql" else CHUNK
    chunks = [objects[start : start + size] for start in range(0, len(objects), size)]
    assignments = ", ".join(
        f"{quote(str(field.column))} = v.{name}"
        for field, name in zip(columns[1:], names[1:], strict=True)
    )
    where = f"t.{quote(str(columns[0].column))} = v.{names[0]}"
    where += f" AND {condition}" if condition else ""
    tail = f" RETURNING {returning}" if returning else ""
    changed = 0
    for chunk in chunks:
        source, params = _row_source(connection, columns, chunk)
        sql = f"UPDATE {quote(meta.db_table)} AS t SET {assignments} FROM {source} WHERE {where}"
        sql += tail
        if prepared_as and connection.vendor == "postgresql":  # one text for any rows
            sql = sql_to_run(connection, statement_of(prepared_as, sql, session_settings))
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, *condition_params])
            changed += cursor.rowcount
    return changed


def _source_names(connection: BaseDatabaseWrapper, count: int) -> list[str]:
    """Return the column names of an UPDATE's source: ours on PostgreSQL, SQLite's own
    for a VALUES list."""
    if connection.vendor == "postgresql":
        return [f"c{i}" for i in range(count)]
    return [f"column{i + 1}" for i in range(count)]


def _row_source(
    connection: BaseDatabaseWrapper, columns: Sequence[Field[Any, Any]], chunk: Sequence[Model]
) -> tuple[str, list[Any]]:
    """Return the source of an UPDATE of ``chunk``'s rows (aliased ``v``), and its params."""
    values = [
        [field.get_db_prep_save(getattr(obj, field.attname), connection) for obj in chunk]
        for field in columns
    ]
    names = _source_names(connection, len(columns))
    if connection.vendor == "postgresql":
        # One array per column: the statement's text is the same for any number of rows.
        arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in columns)
        return f"unnest({arrays}) AS v({', '.join(names)})", values
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    params = [value for values_of_row in zip(*values, strict=True) for value in values_of_row]
    return f"(VALUES {', '.join([row] * len(chunk))}) AS v", params


def insert_rows(model: type[Model], objects: Sequence[Model]) -> None:
    """Insert many new rows without reading anything back (their ids stay unset).

    On PostgreSQL one prepared ``INSERT ... SELECT`` from one array per column (a loop
    step starts one attempt or a thousand with the same text, planned once; a ``COPY``
    cost the server more than the insert of a few rows, and two round trips),
    ``bulk_create`` elsewhere."""
    connection = _connection(model)
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(objects)
        return
    pk = model._meta.pk
    fields = [f for f in model._meta.concrete_fields if f is not pk or pk.has_default()]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in fields)
    arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in fields)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) SELECT * FROM unnest({arrays})"
    statement = statement_of("ratequeue_insert_rows", sql)
    values = [
        [field.get_db_prep_save(getattr(obj, field.attname), connection) for obj in objects]
        for field in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql_to_run(connection, statement), values)


class RowCopy:
    """Copy many new rows into ``model`` (PostgreSQL), all alike but for a few columns.

    Those columns are ``varying``, as :class:`RowInsert`'s for one row: a bulk enqueue's
    rows are written without building a model instance per row. The ``fixed`` values are
    converted once; each row gives its ``varying`` values in their order, a JSON column's
    as JSON text when ``json_text`` (an enqueue checked it as such), else as the value to
    dump."""

    def __init__(
        self,
        model: type[Model],
        fixed: dict[str, Any],
        varying: Sequence[str],
        json_text: bool = True,
    ) -> None:
        fields = [
            f for f in model._meta.concrete_fields if f.attname in varying or f.attname in fixed
        ]
        self.model = model
        # Per column: the index of its value in a row's ``varying``, or its fixed value.
        self.order: list[tuple[int | None, Any]] = []
        self.dump: list[bool] = []
        for field in fields:
            as_json = isinstance(field, JSONField)
            if field.attname in varying:
                self.order.append((varying.index(field.attname), None))
                self.dump.append(as_json and not json_text)
                continue
            value = fixed[field.attname]
            self.order.append(
                (None, json.dumps(value) if as_json and value is not None else value)
            )
            self.dump.append(False)
        quote = _connection(model).ops.quote_name
        columns = ", ".join(quote(str(field.column)) for field in fields)
        self.sql = f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN"

    def copy(self, rows: Iterable[Sequence[Any]]) -> None:
        order = list(zip(self.order, self.dump, strict=True))
        with _connection(self.model).cursor() as cursor, cursor.cursor.copy(self.sql) as copy:
            for values in rows:
                row = []
                for (index, fixed), dump in order:
                    value = fixed if index is None else values[index]
                    if dump and value is not None:
                        value = json.dumps(value)
                    row.append(value)
                copy.write_row(row)


class RowInsert:
    """Insert one row per call into ``model``, whose columns hold the same values but a few.

    It is a single enqueue's hot path, where converting two dozen values per call costs as
    much as the database's work.

    The ``fixed`` values are converted once; on PostgreSQL they are rendered into the
    statement as literals, exactly as client-side binding would render them per call, with
    each ``%`` doubled so that the driver does not take it for a placeholder. Each
    call passes only the ``varying`` columns' values, converted by the caller. The statement
    is the session's prepared INSERT (:mod:`..db`) from its second use.

    ``execute(async_commit=True)`` (PostgreSQL, outside a transaction only) commits the row
    without waiting for the WAL flush: ``synchronous_commit`` is read at commit, so the
    statement turns it off for its own transaction in its ``RETURNING``. ``returning`` is
    an expression evaluated there too, on PostgreSQL (an enqueue's signal to the loop).
    """

    def __init__(
        self,
        model: type[Model],
        fixed: dict[str, Any],
        varying: Sequence[str],
        returning: str = "",
    ) -> None:
        fields = model._meta.concrete_fields
        missing = {field.attname for field in fields} - set(fixed) - set(varying)
        if missing:
            raise ValueError(f"No value for column(s) {', '.join(sorted(missing))}.")
        connection = _connection(model)
        self.model = model
        literal = None
        if connection.vendor == "postgresql":
            from psycopg.sql import Literal

            connection.ensure_connection()
            literal = Literal
        arguments, self.params = _insert_arguments(connection, fields, fixed, varying, literal)
        on_postgresql = literal is not None
        self.statements = {
            (relax, skip): _insert_statement(
                model,
                ", ".join(arguments),
                relax and on_postgresql,
                returning if on_postgresql else "",
                skip,
            )
            for relax in (False, True)
            for skip in (False, True)
        }

    def execute(
        self, values: Sequence[Any], async_commit: bool = False, skip_taken: bool = False
    ) -> bool:
        """Insert the row whose ``varying`` columns hold ``values``, in their order.

        Each value is as the database takes it (what ``Field.get_db_prep_save`` returns).
        With ``skip_taken``, a row whose primary key is taken is not inserted (no error,
        nothing returned, no savepoint needed): return whether it was."""
        params = [value if index is None else values[index] for index, value in self.params]
        connection = _connection(self.model)
        relax = async_commit and not connection.in_atomic_block
        with connection.cursor() as cursor:
            cursor.execute(sql_to_run(connection, self.statements[relax, skip_taken]), params)
            return cursor.rowcount != 0


def _insert_arguments(
    connection: BaseDatabaseWrapper,
    fields: Sequence[Field[Any, Any]],
    fixed: dict[str, Any],
    varying: Sequence[str],
    literal: Any,
) -> tuple[list[str], list[tuple[int | None, Any]]]:
    """Return an INSERT's arguments in column order, and what each call sends: per
    placeholder, the index of its value in a call's ``values``, or a fixed value.

    ``literal`` (psycopg's ``Literal``, on PostgreSQL) renders the fixed values into the
    statement; without it they are sent as parameters."""
    arguments: list[str] = []
    params: list[tuple[int | None, Any]] = []
    for field in fields:
        if field.attname in varying:
            arguments.append("%s")
            params.append((varying.index(field.attname), None))
            continue
        value = field.get_db_prep_save(fixed[field.attname], connection)
        if literal is not None:
            rendered = literal(value).as_string(connection.connection)
            arguments.append(rendered.replace("%", "%%"))
        else:
            arguments.append("%s")
            params.append((None, value))
    return arguments, params


def _insert_statement(
    model: type[Model], arguments: str, async_commit: bool, returning: str, skip_taken: bool
) -> ServerStatement:
    """Return the INSERT of one row with ``arguments`` for its columns.

    Every such statement of a model is prepared from the same text with numbered
    parameters, under one name per variant."""
    quote = _connection(model).ops.quote_name
    fields = model._meta.concrete_fields
    columns = ", ".join(quote(str(field.column)) for field in fields)
    numbered = ", ".join(f"${i}" for i in range(1, len(fields) + 1))
    expressions = [returning] if returning else []
    if async_commit:
        expressions.append("set_config('synchronous_commit', 'off', true)")
    tail = f" ON CONFLICT ({quote(model._meta.pk.attname)}) DO NOTHING" if skip_taken else ""
    if expressions:
        tail += f" RETURNING {', '.join(expressions)}"
    insert = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES "
    variant = ("_async" if async_commit else "") + ("_new" if skip_taken else "")
    return ServerStatement(
        name=f"ratequeue_insert_{model._meta.db_table}{variant}",
        text=f"{insert}({arguments}){tail}",
        prepared_text=f"{insert}({numbered}){tail}",
        arguments=arguments,
    )

"""Hot statements that a PostgreSQL session prepares on the server from their second use.

A session that runs a :class:`ServerStatement` twice prepares it with SQL ``PREPARE`` and
from then on sends ``EXECUTE``. Not on other databases, nor for a transaction pooler
(``DISABLE_SERVER_SIDE_CURSORS``), nor with ``server_side_binding``. docs/concepts.md ("The
main loop") tells why; docs/operations.md ("Prepared statements and poolers"), when not.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any
from zlib import crc32

from django.db.backends.base.base import BaseDatabaseWrapper

# How the engine's hot statements are planned on PostgreSQL (docs/concepts.md, "The main
# loop"): every read on its index, with plain index scans (which mark the entries of rows
# gone dead as they pass), no JIT, and each prepared statement once, whatever the
# statistics said when it was prepared.
PLANNED_ON_INDEXES = (
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("jit", "off"),
    ("plan_cache_mode", "force_generic_plan"),
)


@dataclass(frozen=True, slots=True)
class ServerStatement:
    """One statement, as plain SQL and as the body of a ``PREPARE``.

    ``text`` has the driver's placeholders; ``prepared_text`` is the body of ``PREPARE
    name (types) AS ...`` with ``$1, $2, ...``. ``arguments`` are the driver's
    placeholders for ``EXECUTE``, in ``$n`` order; ``types``
    may be empty to let the server infer the parameters' types from their use.

    ``session_settings`` are set for the whole session before it prepares the statement,
    so that its one plan is made under them: only for a session the engine alone uses
    (a runner's), as they stay for every later statement of the session."""

    name: str
    text: str
    prepared_text: str
    arguments: str
    types: str = ""
    session_settings: tuple[tuple[str, str], ...] = ()

    @property
    def execute(self) -> str:
        """The ``EXECUTE`` of the prepared statement."""
        return (
            f"EXECUTE {self.name} ({self.arguments})" if self.arguments else f"EXECUTE {self.name}"
        )


# Per database session: the statements used once (False) and those prepared (True).
_sessions: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()


def sql_to_run(connection: BaseDatabaseWrapper, statement: ServerStatement) -> str:
    """Return the SQL to execute for ``statement`` on ``connection``.

    That is its plain text, or ``EXECUTE`` of the session's prepared statement (preparing
    it on its second use)."""
    if connection.vendor != "postgresql":
        return statement.text
    prepared = _sessions.get(connection.connection) if connection.connection else None
    if prepared and prepared.get(statement.name):  # the hot path: checked when prepared
        return statement.execute
    settings = connection.settings_dict
    if settings.get("DISABLE_SERVER_SIDE_CURSORS") or settings["OPTIONS"].get(
        "server_side_binding"
    ):
        return statement.text
    connection.ensure_connection()
    used = _sessions.setdefault(connection.connection, {})
    if statement.name not in used:
        used[statement.name] = False
        return statement.text
    if not used[statement.name]:
        types = f" ({statement.types})" if statement.types else ""
        with connection.cursor() as cursor:
            if statement.session_settings:
                names = ", ".join(
                    f"set_config('{name}', '{value}', false)"
                    for name, value in statement.session_settings
                )
                cursor.execute(f"SELECT {names}")
            cursor.execute(f"PREPARE {statement.name}{types} AS {statement.prepared_text}")
        used[statement.name] = True
    return statement.execute


def server_statement(
    name: str, text: str, session_settings: tuple[tuple[str, str], ...] = ()
) -> ServerStatement:
    """Return the :class:`ServerStatement` of ``text``, named ``name``.

    ``text`` has the driver's ``%s`` placeholders only (no literal ``%``); the server
    infers the parameters' types from their use."""
    parts = text.split("%s")
    numbered = "".join(f"{part}${i}" for i, part in enumerate(parts[:-1], 1)) + parts[-1]
    arguments = ", ".join(["%s"] * (len(parts) - 1))
    return ServerStatement(name, text, numbered, arguments, session_settings=session_settings)


# The statements named by their text (:func:`statement_of`), by prefix, text and settings.
_by_text: dict[tuple[str, str, tuple[tuple[str, str], ...]], ServerStatement] = {}


def statement_of(
    prefix: str, text: str, session_settings: tuple[tuple[str, str], ...] = ()
) -> ServerStatement:
    """Return the :class:`ServerStatement` of ``text``, named ``prefix`` and a hash of it.

    Built once per text: a statement whose text varies (with the process's registry, the
    lease heads, the columns written) is another statement, never a stale one. Only for
    texts of a bounded number of shapes."""
    key = (prefix, text, session_settings)
    if key not in _by_text:
        name = f"{prefix}_{crc32(text.encode()):08x}"
        _by_text[key] = server_statement(name, text, session_settings)
    return _by_text[key]


def execute(
    connection: BaseDatabaseWrapper, statement: ServerStatement, params: list[Any]
) -> list[tuple[Any, ...]]:
    """Run ``statement`` (:func:`sql_to_run`) with ``params``; return the rows it returned."""
    sql = sql_to_run(connection, statement)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []

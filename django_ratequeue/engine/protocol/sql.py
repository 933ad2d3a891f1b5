"""The attempt protocol's statements that are not one-row ORM updates.

The claim (:func:`claim_sql`, for local and remote workers alike) and the report of a
batch of outcomes (:func:`write_outcomes`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from django_ratequeue.db import PLANNED_ON_INDEXES, execute, statement_of
from django_ratequeue.engine.bulk import update_rows
from django_ratequeue.engine.models import Attempt, Job, queue_connection
from django_ratequeue.engine.wakeup import LOOP, notifies, notify_clause

# The columns a PostgreSQL claim returns, after the attempt's id.
CLAIMED_ATTEMPT = ("job_id", "timeout", "queue", "started_at")
CLAIMED_JOB = ("func", "args", "kwargs", "priority", "start_at", "traceparent")


@dataclass(frozen=True)
class Scope:
    """Which dispatched attempts a claim may take.

    Local ones (``remote`` false), or remote ones of ``queues``; of ``functions`` if any
    (a local runner's: those its process knows), but for the ``avoided`` ids."""

    remote: bool = False
    queues: Sequence[str] = ()
    functions: Sequence[str] = ()
    avoided: Sequence[int] = ()

    def where(self) -> tuple[str, list[Any]]:
        """Return the SQL that picks the scope's attempts, and its parameters.

        The attempts are the row ``a``, joined to their job ``j``."""
        sql, params = "a.remote" if self.remote else "NOT a.remote", list[Any]()
        for column, values in (("a.queue", self.queues), ("j.func", self.functions)):
            if values or (column == "a.queue" and self.remote):
                sql += f" AND {column} IN ({placeholders(len(values))})"
                params += list(values)
        if self.avoided:
            sql += f" AND a.id NOT IN ({placeholders(len(self.avoided))})"
            params += list(self.avoided)
        return sql, params


def placeholders(count: int) -> str:
    """Return ``count`` placeholders (an empty list matches nothing: ``NULL``)."""
    return ", ".join(["%s"] * count) if count else "NULL"


def claim_sql(vendor: str, scope: Scope) -> tuple[str, list[Any]]:
    """Return the claim of up to n dispatched attempts of ``scope`` that nobody holds yet.

    They are taken by priority then dispatch order, for worker w of key k (None: a local
    runner), started at s, leased until l (parameters after the scope's: n, w, k, s, l).
    The candidates are picked once, in a CTE (a subquery under ``IN`` may be run again per
    row, and pick more than n). On PostgreSQL, rows another claim is taking at the same
    moment are skipped, not waited for, and the statement returns what the attempts are to
    run."""
    connection = queue_connection()
    attempts = connection.ops.quote_name(Attempt._meta.db_table)
    jobs = connection.ops.quote_name(Job._meta.db_table)
    postgresql = vendor == "postgresql"
    lock = " FOR UPDATE OF a SKIP LOCKED" if postgresql else ""
    returning = f"{attempts}.id"
    source = "picked"
    where = f"{attempts}.id = picked.id"
    if postgresql:
        returning += f", {', '.join(f'{attempts}.{c}' for c in CLAIMED_ATTEMPT)}"
        returning += f", {', '.join(f'j.{c}' for c in CLAIMED_JOB)}"
        source += f", {jobs} j"
        where += f" AND j.id = {attempts}.job_id"
    scoped, params = scope.where()
    sql = (
        f"WITH picked AS{' MATERIALIZED' if postgresql else ''} ("
        f"SELECT a.id FROM {attempts} a JOIN {jobs} j ON j.id = a.job_id"
        f" WHERE a.active AND {scoped} AND a.worker = '' AND a.ended_at IS NULL"
        f" ORDER BY j.priority DESC, a.id LIMIT %s{lock}"
        f") UPDATE {attempts} SET worker = %s, worker_key_id = %s, started_at = %s,"
        f" lease_expires_at = %s FROM {source}"
        f" WHERE {where} AND {attempts}.worker = '' AND {attempts}.ended_at IS NULL"
        f" RETURNING {returning}"
    )
    return sql, params


def run_claim(
    scope: Scope, limit: int, worker: str, key: int | None, stamp: Any, lease: Any
) -> list[tuple[Any, ...]]:
    """Run the claim (:func:`claim_sql`), and return the rows it returned.

    A local runner's claim is the same text at every turn of its process (its functions
    change only with its registry), and planning it cost the database several times
    running it: its session prepares it, planned once on its indexes
    (:data:`~django_ratequeue.db.PLANNED_ON_INDEXES`, set for the runner's session), so
    that a plan made while the attempts table was small is not a sequential scan kept as
    it grows. A remote worker's claim (varying queues and avoided retries, on a web
    process's session) is planned afresh each time."""
    connection = queue_connection()
    sql, params = claim_sql(connection.vendor, scope)
    adapt = connection.ops.adapt_datetimefield_value
    params += [limit, worker, key, adapt(stamp), adapt(lease)]
    if not scope.remote:
        claim = statement_of("ratequeue_claim", sql, PLANNED_ON_INDEXES)
        return execute(connection, claim, params)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def claimed(row: tuple[Any, ...]) -> Attempt:
    """Return an attempt as a PostgreSQL claim returned it, with the part of its job it runs."""
    values = dict(zip(("id", *CLAIMED_ATTEMPT), row, strict=False))
    job_values = dict(zip(CLAIMED_JOB, row[1 + len(CLAIMED_ATTEMPT) :], strict=True))
    for name in ("args", "kwargs"):  # JSON text, as Django's psycopg backend reads it
        if isinstance(job_values[name], str):
            job_values[name] = json.loads(job_values[name])
    attempt = Attempt(**values)
    attempt.job = Job(id=values["job_id"], **job_values)
    return attempt


def write_outcomes(
    attempts: Sequence[Attempt],
    fields: Sequence[str],
    held: str,
    params: Sequence[Any],
    local: bool = False,
) -> int:
    """Write ``fields`` of ``attempts`` in one statement that signals the loop.

    Only the rows where ``held`` (SQL on the row ``t``, with ``params``) holds are written;
    return how many. In a transaction it runs in a savepoint, which a refused statement
    must not abort. A ``local`` runner's session prepares it, as it does its claim
    (:func:`run_claim`)."""
    connection = queue_connection()
    nested = connection.in_atomic_block
    with transaction.atomic(using=connection.alias) if nested else nullcontext():
        return update_rows(
            Attempt,
            attempts,
            fields,
            condition=held,
            condition_params=params,
            # The loop's signal, raised by the statement itself (SQLite: none, it polls).
            returning=notify_clause(LOOP) if notifies() else "",
            prepared_as="ratequeue_report" if local else "",
            session_settings=PLANNED_ON_INDEXES if local else (),
        )

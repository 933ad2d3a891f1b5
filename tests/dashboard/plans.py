"""The plans of the queries a callable runs, checked for sequential scans of big tables.

For the pages and reads that must stay cheap however much history the jobs table holds
(the dashboard, the series, the queue overview): :func:`assert_no_seq_scan` runs the
callable, EXPLAINs every SELECT it sent (PostgreSQL), and fails, with the plan, on a
sequential scan of one of the given tables. :func:`fill_jobs` makes such a table (for
these tests and for ``python -m bench.dashboard``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from django_ratequeue.models import Attempt, Job, QueueMinute

# The jobs the ``million_jobs`` fixture (tests/dashboard/conftest.py) makes.
JOBS = 1_000_000
# The tables no cheap read may scan whole.
BIG_TABLES: tuple[type[Model], ...] = (Job, Attempt)


@dataclass
class QueryReport:
    """What a callable sent: each statement with its plan (JSON, as EXPLAIN gives it)."""

    statements: list[str] = field(default_factory=list)
    plans: list[dict[str, Any]] = field(default_factory=list)
    # (statement, table) for each sequential scan of a watched table.
    seq_scans: list[tuple[str, str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.statements)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def explain_queries(
    work: Callable[[], Any], tables: tuple[type[Model], ...] = BIG_TABLES
) -> QueryReport:
    """Run ``work`` and EXPLAIN each SELECT (or WITH) it sent, noting every sequential
    scan of ``tables``. Statements that write are counted, not explained."""
    watched = {model._meta.db_table for model in tables}
    with CaptureQueriesContext(connection) as captured:
        work()
    report = QueryReport()
    for query in captured.captured_queries:
        sql = query["sql"]
        report.statements.append(sql)
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            (plan,) = cursor.fetchone()[0]
        report.plans.append(plan)
        for node in _nodes(plan["Plan"]):
            if node["Node Type"] == "Seq Scan" and node.get("Relation Name") in watched:
                report.seq_scans.append((sql, node["Relation Name"]))
    return report


def assert_no_seq_scan(
    work: Callable[[], Any],
    tables: tuple[type[Model], ...] = BIG_TABLES,
    max_queries: int | None = None,
) -> QueryReport:
    """Run ``work``; fail on a sequential scan of ``tables`` (showing the statement and its
    plan) or on more than ``max_queries`` statements. Returns the report."""
    report = explain_queries(work, tables)
    for sql, table in report.seq_scans:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        raise AssertionError(f"Sequential scan of {table} in:\n{sql}\n{plan}")
    if max_queries is not None:
        assert report.count <= max_queries, (
            f"{report.count} statements, at most {max_queries} expected:\n"
            + "\n".join(report.statements)
        )
    return report


def fill_jobs(jobs: int = JOBS, queues: int = 20, days: int = 7) -> None:
    """Fill the jobs table with ``jobs`` rows created over the last ``days`` (PostgreSQL,
    one INSERT ... SELECT): 90% complete, the rest failed, canceled, waiting, scheduled,
    retrying and a few running, in ``queues`` queues and 997 concurrency keys; an attempt
    for every fifth job (active for the running ones); a week of per-minute figures for
    every queue; then VACUUM ANALYZE, so that the planner knows the tables' sizes and
    index-only scans find their pages all-visible, as autovacuum leaves a production
    table (ANALYZE alone leaves the counts reading the heap). Outside a transaction
    (VACUUM cannot run in one): from a module-scoped fixture or a benchmark."""
    job, attempt, minute = (
        connection.ops.quote_name(m._meta.db_table) for m in (Job, Attempt, QueueMinute)
    )
    spacing = days * 86400 / jobs
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {job} (id, func, args, kwargs, queue, concurrency_key, priority,
                status, start_at, created_at, attempts, retry, on_complete, owner, cost,
                tokens_reserved, cancel_requested, parent_id, error, traceback,
                exception_class_path, finished_at)
            SELECT lpad(to_hex((extract(epoch FROM t.at) * 1000000)::bigint), 13, '0')
                    || lpad(to_hex(i), 20, '0'),
                'bench.jobs.noop', '[]', '{{}}', 'q' || (i %% %(queues)s),
                'tenant-' || (i %% 997), 0, s.status, t.at, t.at, 1, '{{}}', '', '', 1,
                false, false, '', '', '', '',
                CASE WHEN s.status IN ('complete', 'failed', 'canceled') THEN t.at END
            FROM generate_series(1, %(jobs)s) AS i,
                LATERAL (
                    SELECT now() - make_interval(secs => (%(jobs)s - i) * %(spacing)s) AS at
                ) t,
                LATERAL (SELECT CASE
                    WHEN i %% 10000 = 7 THEN 'running'
                    WHEN i %% 100 < 90 THEN 'complete'
                    WHEN i %% 100 < 94 THEN 'failed'
                    WHEN i %% 100 < 96 THEN 'canceled'
                    WHEN i %% 100 < 98 THEN 'waiting'
                    WHEN i %% 100 < 99 THEN 'scheduled'
                    ELSE 'retrying' END AS status) s
            """,
            {"jobs": jobs, "queues": queues, "spacing": spacing},
        )
        cursor.execute(
            f"""
            INSERT INTO {attempt} (job_id, number, queue, concurrency_key, active,
                dispatched_at, worker, remote, started_at, ended_at, outcome, wait,
                wait_queue, error, traceback, exception_class_path)
            SELECT id, 1, queue, concurrency_key, status = 'running', created_at, '', false,
                created_at, CASE WHEN status = 'running' THEN NULL ELSE created_at END,
                CASE WHEN status = 'running' THEN '' ELSE 'succeeded' END, '', '', '', '', ''
            FROM {job} WHERE status = 'running' OR substr(id, 33, 1) IN ('0', '5')
            """
        )
        cursor.execute(
            f"""
            INSERT INTO {minute} (queue, minute, enqueued, started, completed, wait_h08, run_h05)
            SELECT 'q' || q, date_trunc('minute', now()) - make_interval(mins => m),
                10, 10, 9, 10, 9
            FROM generate_series(0, %(queues)s - 1) AS q,
                generate_series(0, %(minutes)s - 1) AS m
            """,
            {"queues": queues, "minutes": days * 1440},
        )
        cursor.execute(f"VACUUM ANALYZE {job}, {attempt}, {minute}")


def empty_tables() -> None:
    """Remove what :func:`fill_jobs` made."""
    tables = ", ".join(
        connection.ops.quote_name(m._meta.db_table) for m in (Job, Attempt, QueueMinute)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")

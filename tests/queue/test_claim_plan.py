"""The runners' claim and the loop's read of the active attempts go through partial indexes
that hold only the rows they want, whatever history the attempts table keeps and whether
or not PostgreSQL has statistics for it yet (its autovacuum may be off)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_ratequeue import db, enqueue_many
from django_ratequeue.engine.execution import run_attempt
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.lease import STEP_SETTINGS
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Attempt, Job
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's planner"),
]

BATCH = 1000


def ended_attempts(batches: int) -> None:
    """``batches`` of BATCH jobs run to their end by the loop and a runner of this process:
    as many ended attempts in the table, kept as they are in production."""
    loop = leading_loop()
    runner = Runner(beat(force=True))
    with override_settings(RATEQUEUE={"MAX_CONCURRENCY": BATCH}):
        for _ in range(batches):
            enqueue_many(jobs.add, [[1, 2]] * BATCH)
            loop.run(30)
            runner.report([run_attempt(attempt) for attempt in runner.claim(BATCH)])
            loop.run(30)


def plans(work: object, settings: tuple[tuple[str, str], ...] = ()) -> str:
    """The plans of what ``work`` sends (prepared statements as they were cached), as text,
    planned as a loop step plans them: its first statement (which applies the step's
    ``settings``) without them, the others in a transaction with them."""
    with CaptureQueriesContext(connection) as captured:
        work()  # type: ignore[operator]
    statements = [
        query["sql"]
        for query in captured.captured_queries
        if query["sql"].lstrip().upper().startswith(("SELECT", "WITH", "EXECUTE", "UPDATE"))
    ]
    found = []
    with transaction.atomic(), connection.cursor() as cursor:
        for number, sql in enumerate(statements):
            if number == 1:
                for name, value in settings:
                    cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
            cursor.execute(f"EXPLAIN {sql}")
            found.append("\n".join(row[0] for row in cursor.fetchall()))
    return "\n\n".join(found)


def forget_prepared_statements() -> None:
    """Start this session's prepared statements afresh, as a new session would.

    Each test's transaction rolls back the settings an earlier test's runner set for its
    session, while the statements it prepared stay (a runner claims outside any
    transaction: its settings stay with its session)."""
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    db._sessions.pop(connection.connection, None)


def forget_statistics() -> None:
    """Make PostgreSQL plan as if the attempts table had never been ANALYZEd."""
    table = Attempt._meta.db_table
    with connection.cursor() as cursor:
        for sql in (
            "DELETE FROM pg_statistic WHERE starelid = %s::regclass",
            "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = %s::regclass",
        ):
            cursor.execute(sql, [connection.ops.quote_name(table)])


@pytest.mark.parametrize("analyzed", [False, True], ids=["no statistics", "analyzed"])
def test_the_claim_reads_only_claimable_attempts(analyzed: bool) -> None:
    forget_prepared_statements()
    if not analyzed:
        forget_statistics()
    # A long-lived runner claimed while the table was empty: a plan cached then (were the
    # claim prepared) would stay what suits an empty table as the table grows, with no
    # ANALYZE to make PostgreSQL plan it again.
    early = Runner(beat(force=True))
    loop = leading_loop()
    for _ in range(8):
        early.claim(5)
        loop.step()
    ended_attempts(3)
    enqueue_many(jobs.add, [[1, 2]] * 5)
    leading_loop().run(30)
    if analyzed:
        table = connection.ops.quote_name(Attempt._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {table}")
    plan = plans(lambda: early.claim(5))
    assert "ratequeue_attempt_claimable" in plan, plan
    assert f"Seq Scan on {Attempt._meta.db_table}" not in plan, plan
    # The runner's session prepared its claim and planned it once, on the indexes, while
    # the table was empty: the plan above is that one, never a plan made afresh.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE name LIKE 'ratequeue_claim_%'"
        )
        [(generic, custom)] = cursor.fetchall()
    assert (generic > 0, custom) == (True, 0)
    # Every statement of a loop step (of a loop that has stepped since the tables were
    # empty), as the step plans it: none scans the attempts or the jobs whole, and none is
    # a bitmap scan (which would read the entries of ended attempts at every step).
    enqueue_many(jobs.add, [[1, 2]] * 5)
    plan = plans(loop.step, STEP_SETTINGS)
    assert "ratequeue_attempt_active" in plan, plan
    for model in (Attempt, Job):
        assert f"Seq Scan on {model._meta.db_table}" not in plan, plan
    assert "Bitmap" not in plan, plan

"""queue/skipscan.distinct_values: the skip scan every reader of distinct queues shares."""

from __future__ import annotations

import pytest

from django_ratequeue import enqueue
from django_ratequeue.db import execute, server_statement
from django_ratequeue.engine.models import Status, queue_connection
from django_ratequeue.engine.skipscan import distinct_values
from django_ratequeue.models import Job
from tests.queue import jobs

pytestmark = pytest.mark.django_db
WAITING = f"status = '{Status.WAITING.value}'"


def table() -> str:
    return queue_connection().ops.quote_name(Job._meta.db_table)


def rows(sql: str, params: list[object]) -> list[tuple[object, ...]]:
    with queue_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def fill() -> None:
    for queue in ["c", "a", "b", "a", "d"]:
        enqueue(jobs.add, args=[1, 1], queue=queue)
    Job.objects.filter(queue="d").update(status=Status.COMPLETE)


def test_it_lists_each_value_once_in_order() -> None:
    fill()
    queues = distinct_values("q", table(), "queue")
    sql = f"WITH RECURSIVE {queues} SELECT queue FROM q WHERE queue IS NOT NULL"
    assert rows(sql, []) == [("a",), ("b",), ("c",), ("d",)]


def test_a_condition_and_bounds_narrow_it() -> None:
    fill()
    queues = distinct_values("q", table(), "queue", where=WAITING, after="%s", through="%s")
    sql = f"WITH RECURSIVE {queues} SELECT queue FROM q WHERE queue IS NOT NULL"
    assert rows(sql, ["a", "c", "c"]) == [("b",), ("c",)]


def test_per_group_it_lists_each_groups_values() -> None:
    fill()
    statuses = "SELECT %s AS status UNION ALL SELECT %s AS status"
    queues = distinct_values("q", table(), "queue", per=("status", statuses))
    sql = f"WITH RECURSIVE {queues} SELECT status, queue FROM q WHERE queue IS NOT NULL"
    found = sorted(rows(sql, [Status.WAITING.value, Status.COMPLETE.value]))
    assert found == [("complete", "d"), ("waiting", "a"), ("waiting", "b"), ("waiting", "c")]


@pytest.mark.parametrize(
    ("after", "expected"), [("", ["a", "b", "c"]), ("a", ["b", "c", "a"]), ("c", ["a", "b", "c"])]
)
def test_it_writes_dispatchs_turns_with_their_wrap_around(after: str, expected: list[str]) -> None:
    """The statement queue/dispatch.waiting_queues sends, server-prepared, through it."""
    fill()
    first = distinct_values("q", table(), "queue", where=WAITING, after="%s")
    wrapped = distinct_values("w", table(), "queue", where=WAITING, through="%s")
    sql = (
        f"WITH RECURSIVE {first}, {wrapped}"
        f" SELECT * FROM (SELECT 1 AS part, queue FROM q WHERE queue IS NOT NULL LIMIT %s) AS a"
        f" UNION ALL"
        f" SELECT * FROM (SELECT 2 AS part, queue FROM w WHERE queue IS NOT NULL LIMIT %s) AS b"
        f" ORDER BY part, queue"
    )
    statement = server_statement("ratequeue_test_skipscan", sql)
    limit = 1000
    for _ in range(3):  # the third use runs the prepared statement (PostgreSQL)
        found = execute(
            queue_connection(), statement, [after, after, after, limit, limit if after else 0]
        )
        assert [queue for _part, queue in found][:limit] == expected

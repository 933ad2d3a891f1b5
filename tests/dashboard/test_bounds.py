"""The dashboard's cost follows the queues and the minutes shown, never the jobs kept: the
same statements whatever the number of jobs (their plans on a large table are checked on
PostgreSQL by the query-plan test)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_ratequeue import clock, enqueue_many
from django_ratequeue.models import QueueMinute
from django_ratequeue.monitor.snapshot import CHARTED_QUEUES
from django_ratequeue.plugins.rollups.counting import floor_minute
from tests.dashboard.test_views import DASHBOARD, LIVE
from tests.queue import jobs


def statements(client: Client, page: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(page).status_code == 200
    return [query["sql"] for query in queries.captured_queries]


@pytest.mark.django_db
@pytest.mark.parametrize("page", [DASHBOARD, LIVE])
def test_the_statements_do_not_grow_with_the_jobs(admin_client: Client, page: str) -> None:
    jobs.add.using(queue="emails").enqueue(1, 1)
    few = statements(admin_client, page)
    enqueue_many(jobs.add, [[n, 1] for n in range(500)], queue="emails")
    many = statements(admin_client, page)
    assert len(many) == len(few)


@pytest.mark.django_db
def test_at_most_charted_queues_are_read_one_by_one(admin_client: Client) -> None:
    minute = floor_minute(clock.now())
    QueueMinute.objects.bulk_create(
        [
            QueueMinute(queue=f"q{n:03d}", minute=minute, started=n)
            for n in range(CHARTED_QUEUES * 2)
        ]
    )
    response = admin_client.get(DASHBOARD)
    assert len(response.context["charted"]) == CHARTED_QUEUES
    assert response.context["not_charted"] > 0
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(LIVE)
    minutes = [q for q in queries.captured_queries if "ratequeue_queueminute" in q["sql"]]
    assert len(minutes) <= CHARTED_QUEUES + 2  # each charted queue, all queues, which have figures

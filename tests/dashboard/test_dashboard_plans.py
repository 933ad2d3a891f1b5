"""The dashboard page and its live body on a 1,000,000-job table (PostgreSQL): no
sequential scan of the jobs, attempts or per-minute tables, and a number of statements
that follows the queues shown, not the jobs."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from django_ratequeue.contrib.prometheus import metrics_view
from django_ratequeue.models import Attempt, Job, QueueMinute
from django_ratequeue.monitor.snapshot import CHARTED_QUEUES
from tests.dashboard.plans import assert_no_seq_scan
from tests.dashboard.test_views import DASHBOARD, LIVE

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.django_db,
    pytest.mark.usefixtures("million_jobs"),
]
# The overview: its counts, the loop, clock, workers (local and remote) and limits (9), the
# limit set at enqueue (one statement for every unconfigured queue); the session and the
# user; then the dashboard's own: the active attempts, limits (2), the queues with
# figures, the rate limits (the key-less rows, then each limit's first keys), the series
# (one statement for the charted queues, one for all queues), the arrivals not counted
# yet (where counting stopped, then the jobs created since) and the busiest keys' own
# limits (one statement).
MAX_STATEMENTS = 10 + 2 + 4 + 1 + len(settings.RATEQUEUE["RATE_LIMITS"]) + 2 + 2 + 1


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("operator", password="not-used"))
    return client


@pytest.mark.parametrize("window", ["hour", "day"])
@pytest.mark.parametrize("page", [DASHBOARD, LIVE])
def test_the_dashboard_reads_no_table_whole(operator: Client, page: str, window: str) -> None:
    took: list[float] = []

    def load() -> None:
        start = time.perf_counter()
        response = operator.get(page, {"window": window})
        took.append(time.perf_counter() - start)
        assert response.status_code == 200
        assert len(response.context["charted"]) == CHARTED_QUEUES

    operator.get(page, {"window": window})  # a warm cache, as for a page left open
    report = assert_no_seq_scan(
        load, tables=(Job, Attempt, QueueMinute), max_queries=MAX_STATEMENTS
    )
    # Shown, not asserted: timings belong to bench/ (run with -s to see them).
    print(f"{page}?window={window}: {report.count} statements, {took[0] * 1000:.0f} ms")


# The totals, the overview's counts, loop and workers (as for the dashboard, 10), and the
# limit set at enqueue: a number that follows the queues, not the jobs.
SCRAPE_STATEMENTS = 1 + 10 + 1


def test_a_prometheus_scrape_reads_no_table_whole() -> None:
    took: list[float] = []

    def scrape() -> None:
        start = time.perf_counter()
        response = metrics_view(RequestFactory().get("/metrics"))
        took.append(time.perf_counter() - start)
        assert response.status_code == 200 and b"ratequeue_jobs_total" in response.content

    scrape()
    report = assert_no_seq_scan(
        scrape, tables=(Job, Attempt, QueueMinute), max_queries=SCRAPE_STATEMENTS
    )
    # Shown, not asserted: timings belong to bench/ (run with -s to see them).
    print(f"scrape: {report.count} statements, {took[-1] * 1000:.0f} ms")

"""The reads behind the dashboard stay cheap on a 1,000,000-job table: no sequential scan
of the jobs or attempts table, and few statements (PostgreSQL's plans)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from django_ratequeue.models import Attempt, Job, QueueMinute
from django_ratequeue.monitor.figures import by_queue, queues_with_figures, series, series_by_queue
from django_ratequeue.monitor.overview import queue_overview
from django_ratequeue.plugins.rollups.counting import Tally
from django_ratequeue.plugins.rollups.plugin import first_arrival_since
from tests.dashboard.plans import JOBS, assert_no_seq_scan

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.django_db,
    pytest.mark.usefixtures("million_jobs"),
]
QUEUES = 20


def test_the_table_is_filled() -> None:
    assert Job.objects.count() == JOBS
    assert Attempt.objects.filter(active=True).exists()


def test_series_reads_minutes_not_jobs() -> None:
    now = timezone.now()
    for queue in ("q3", None):
        for since, step in ((timedelta(hours=1), 1), (timedelta(days=1), 5)):
            report = assert_no_seq_scan(
                partial(series, queue, now - since, now, timedelta(minutes=step)),
                tables=(Job, Attempt, QueueMinute),
                max_queries=1,
            )
            assert report.count == 1
    queues = [f"q{n}" for n in range(QUEUES)]
    report = assert_no_seq_scan(
        partial(series_by_queue, queues, now - timedelta(days=1), now, timedelta(minutes=15)),
        tables=(Job, Attempt, QueueMinute),
        max_queries=1,
    )
    assert report.count == 1


def test_queues_with_figures_and_by_queue() -> None:
    now = timezone.now()
    report = assert_no_seq_scan(
        lambda: queues_with_figures(now - timedelta(hours=1)),
        tables=(Job, Attempt, QueueMinute),
        max_queries=1,
    )
    assert report.count == 1
    assert queues_with_figures(now - timedelta(hours=1)) == sorted(f"q{n}" for n in range(QUEUES))
    assert_no_seq_scan(
        lambda: by_queue(now - timedelta(minutes=1), now),
        tables=(Job, Attempt, QueueMinute),
        max_queries=1,
    )


def test_queue_overview() -> None:
    """A statement for the counts, a few for the loop, the clock, workers and limits (at
    most 8), and one
    for the limit the unconfigured queues' next jobs were enqueued with, whatever the
    number of queues."""
    report = assert_no_seq_scan(queue_overview, max_queries=10)
    print(f"queue_overview: {report.count} statements on {JOBS:,} jobs")
    overview = queue_overview()
    assert {q.name for q in overview.queues} >= {f"q{n}" for n in range(QUEUES)}


def test_the_loops_count_of_arrivals_reads_the_creation_index() -> None:
    """Run at every step: its cost follows the jobs created since the last one."""
    now = Job.objects.latest("created_at").created_at + timedelta(seconds=1)
    tally = Tally(now)
    assert_no_seq_scan(
        lambda: tally.count_arrivals(now - timedelta(seconds=20), now), max_queries=1
    )
    assert sum(row["enqueued"] for row in tally.rows.values()) > 0
    assert_no_seq_scan(lambda: first_arrival_since(now - timedelta(seconds=10)), max_queries=1)

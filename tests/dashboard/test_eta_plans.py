"""The promised starts of a page of 50 jobs stay cheap on a 1,000,000-job table: one
statement per job (bounded ranges of the dispatch index), a few per page, and no
sequential scan of the jobs, attempts or rollups (PostgreSQL's plans)."""

from __future__ import annotations

from typing import Any

import pytest

from django_ratequeue import Status
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.models import Attempt, Job, QueueMinute
from django_ratequeue.plugins.eta.estimates import ETA_FIELDS, job_etas
from tests.dashboard.plans import assert_no_seq_scan

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.django_db,
    pytest.mark.usefixtures("million_jobs"),
]
PAGE = 50
# Per page: the queues' runtime limits, MAX_CONCURRENCY as in force, the active
# attempts, and per queue (20): its run time (recent minutes, else its totals) and
# whether any key has limits of its own (KeyLimit).
PER_PAGE = 3 + 3 * 20


def test_a_page_of_etas_reads_indexes_only() -> None:
    unfinished = [Status.WAITING, Status.SCHEDULED, Status.RETRYING, Status.RUNNING]
    page = list(Job.objects.filter(status__in=unfinished).only(*ETA_FIELDS)[:PAGE])
    assert len(page) == PAGE
    beat(force=True)  # a live worker: without one, no estimate (basis "no_worker")
    report = assert_no_seq_scan(
        lambda: job_etas(page),
        tables=(Job, Attempt, QueueMinute),
        max_queries=PAGE + PER_PAGE,
    )
    ahead = [sql for sql in report.statements if "UNION ALL" in sql]
    assert len(ahead) == sum(job.status != Status.RUNNING for job in page)
    etas = job_etas(page)
    waiting = [job for job in page if job.status == Status.WAITING]
    assert waiting and all(etas[job.pk].estimated_start is not None for job in waiting)


def index_conditions(plan: dict[str, Any]) -> list[str]:
    """The index conditions of every scan of the dispatch index in ``plan``."""
    found = []
    if plan.get("Index Name") == "ratequeue_job_ready_by_key":
        found.append(plan.get("Index Cond", ""))
    for child in plan.get("Plans", []):
        found += index_conditions(child)
    return found


def test_each_range_ahead_is_bounded_by_the_index() -> None:
    """Each of the four ranges is an index condition, not a filter over the key's jobs: so
    a job reads the entries ahead of it (at most POSITION_LIMIT each), not those behind."""
    (job,) = Job.objects.filter(status=Status.WAITING).only(*ETA_FIELDS)[:1]
    report = assert_no_seq_scan(lambda: job_etas([job]), tables=(Job, Attempt, QueueMinute))
    (plan,) = [
        p for sql, p in zip(report.statements, report.plans, strict=False) if "UNION" in sql
    ]
    conditions = index_conditions(plan["Plan"])
    assert len(conditions) == 4, plan
    assert all("priority" in condition for condition in conditions), conditions

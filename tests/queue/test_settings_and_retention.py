"""Queue settings checks, the enqueue rate limit, and retention."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from django_ratequeue import EnqueueRateLimited, enqueue, enqueue_many
from django_ratequeue.models import Attempt, Job
from tests.queue import jobs


def check_ids(**settings: object) -> list[str]:
    with override_settings(RATEQUEUE=settings):
        return sorted(e.id for e in checks.run_checks() if e.id.startswith("django_ratequeue.E2"))


@pytest.mark.django_db  # Django 6's checks read the database
def test_queue_settings_are_checked() -> None:
    assert check_ids(QUEUES={"emails": {"max_concurrency": 2, "total_concurrency": 8}}) == []
    assert check_ids(QUEUES={"emails": {"key_concurrency": 2}}) == ["django_ratequeue.E214"]
    for hostile in [0, -1, 101, 1e308, float("inf"), float("nan"), True, "3"]:
        assert check_ids(QUEUES={"emails": {"total_concurrency": hostile}}) == [
            "django_ratequeue.E218"
        ], hostile
    assert check_ids(QUEUES={"emails": {"max_concurrency": 101}}) == ["django_ratequeue.E213"]
    assert check_ids(QUEUES={"emails": {"concurrency": 2}}) == ["django_ratequeue.E212"]
    assert check_ids(QUEUES={"x": {"rate_limit": "nope"}}) == ["django_ratequeue.E215"]
    assert check_ids(MAX_CONCURRENCY=0) == ["django_ratequeue.E201"]
    assert check_ids(WORKER_DEAD_AFTER=1, HEARTBEAT_INTERVAL=2) == ["django_ratequeue.E203"]
    assert check_ids(DEFAULT_RETRIES=-1) == ["django_ratequeue.E206"]
    assert check_ids(ENQUEUE_ASYNC_COMMIT="yes") == ["django_ratequeue.E208"]
    assert check_ids(ENQUEUE_RATE_LIMIT={"rate": 200, "period": 1, "capacity": 600}) == []
    assert check_ids(ENQUEUE_RATE_LIMIT={"rate": 200}) == ["django_ratequeue.E207"]
    assert check_ids(ENQUEUE_RATE_LIMIT=200) == ["django_ratequeue.E207"]


@pytest.mark.django_db
def test_enqueue_rate_limit_refuses_and_writes_nothing() -> None:
    with override_settings(RATEQUEUE={"ENQUEUE_RATE_LIMIT": {"rate": 2, "period": 60}}):
        enqueue(jobs.add, args=[1, 2])
        with pytest.raises(EnqueueRateLimited):
            enqueue_many(jobs.add, [[1, 2], [3, 4]])
        enqueue(jobs.add, args=[1, 2])
        with pytest.raises(EnqueueRateLimited) as refused:
            enqueue(jobs.add, args=[1, 2])
        assert refused.value.retry_at is not None
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_failed_jobs_are_kept_for_their_own_retention(settings: Any) -> None:
    settings.RATEQUEUE = {
        **settings.RATEQUEUE,
        "RETENTION": timedelta(days=1),
        "FAILED_RETENTION": timedelta(days=30),
    }
    ages = {"complete": [2], "canceled": [2], "failed": [2, 29, 31]}
    kept = set()
    for status, days in ages.items():
        for age in days:
            handle = enqueue(jobs.add, args=[1, 2])
            finished = timezone.now() - timedelta(days=age)
            Job.objects.filter(pk=handle.id).update(status=status, finished_at=finished)
            if status == "failed" and age < 30:
                kept.add(handle.id)
    call_command("ratequeue_prune", stdout=StringIO())
    assert set(Job.objects.values_list("pk", flat=True)) == kept
    # Shorter than RETENTION works too.
    settings.RATEQUEUE = {**settings.RATEQUEUE, "FAILED_RETENTION": timedelta(days=10)}
    call_command("ratequeue_prune", stdout=StringIO())
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_prune_deletes_finished_jobs_past_retention() -> None:
    old, recent, waiting = (enqueue(jobs.add, args=[1, 2]) for _ in range(3))
    long_ago = timezone.now() - timedelta(days=30)
    Job.objects.filter(pk=old.id).update(status="complete", finished_at=long_ago)
    Job.objects.filter(pk=recent.id).update(status="complete", finished_at=timezone.now())
    Attempt.objects.create(job_id=old.id, number=1, queue="default", dispatched_at=long_ago)
    out = StringIO()
    call_command("ratequeue_prune", stdout=out)
    assert "Pruned 1 finished job." in out.getvalue()
    assert set(Job.objects.values_list("pk", flat=True)) == {recent.id, waiting.id}
    assert not Attempt.objects.exists()

"""Which waiting job starts first: priority, then readiness (the oldest start_at: enqueued,
scheduled or back from a retry's back-off), then arrival; a rate-gated queue's jobs whose
tokens are reserved keep their place. Run with the loop in this process, one start per
pass (one slot), and the dispatch's statements read the head of the dispatch index."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ratequeue import Handle, Status, enqueue, enqueue_many
from django_ratequeue.engine.fairness.keys import next_jobs
from django_ratequeue.models import Attempt, Job
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass

pytestmark = pytest.mark.django_db

ONE_AT_A_TIME = {"QUEUES": {"line": {"max_concurrency": 1}}}
FINISHED = (Status.COMPLETE, Status.FAILED)


def start_order(*handles: Handle[Any]) -> list[str]:
    """Run passes until every job is final; the ids of the attempts' jobs, in the order
    they were dispatched."""

    def done() -> bool:
        run_pass()
        finished = Job.objects.filter(pk__in=[h.id for h in handles], status__in=FINISHED)
        return finished.count() == len(handles)

    wait_for(done, timeout=30, message="every job to finish")
    return list(Attempt.objects.order_by("pk").values_list("job_id", flat=True))


@override_settings(RATEQUEUE=ONE_AT_A_TIME)
def test_equal_priority_starts_the_job_ready_longest_first() -> None:
    now = timezone.now()
    latest = enqueue(jobs.add, args=[1, 1], queue="line")
    earlier = enqueue(jobs.add, args=[2, 2], queue="line", start_at=now - timedelta(hours=2))
    earliest = enqueue(jobs.add, args=[3, 3], queue="line", start_at=now - timedelta(hours=10))
    urgent = enqueue(jobs.add, args=[4, 4], queue="line", priority=1)
    assert start_order(latest, earlier, earliest, urgent) == [
        urgent.id,
        earliest.id,
        earlier.id,
        latest.id,
    ]


@override_settings(RATEQUEUE=ONE_AT_A_TIME)
def test_a_retry_rejoins_behind_the_jobs_ready_before_it() -> None:
    """Back from its back-off, a job is ready again: behind the jobs that were ready
    before, not at the head because it arrived first."""
    retry = {"retry_count": 1, "initial_interval": 0.001, "randomize_interval": False}
    flaky = enqueue(jobs.fail, queue="line", retries=retry)
    second = enqueue(jobs.add, args=[1, 1], queue="line")
    third = enqueue(jobs.add, args=[2, 2], queue="line")
    assert start_order(flaky, second, third) == [flaky.id, second.id, third.id, flaky.id]


@override_settings(RATEQUEUE=ONE_AT_A_TIME)
def test_a_batch_with_one_start_time_starts_in_its_order() -> None:
    now = timezone.now()
    batch = [enqueue(jobs.add, args=[i, i], queue="line", start_at=now) for i in range(4)]
    assert start_order(*batch) == [handle.id for handle in batch]


def test_jobs_whose_tokens_are_reserved_keep_the_head() -> None:
    """A reserved job starts at its reserved time, holding its slot meanwhile: a job ready
    before that time must not pass it and reserve too, step after step."""
    limits = {"slow": {"kind": "token bucket", "rate": 1, "period": 60}}
    gated = {"RATE_LIMITS": limits, "QUEUES": {"gated": {"rate_limit": "slow"}}}
    with override_settings(RATEQUEUE=gated):
        first = enqueue(jobs.add, args=[1, 1], queue="gated")
        waiting = [enqueue(jobs.add, args=[i, i], queue="gated") for i in range(3)]
        run_pass()  # the first takes the bucket's token and runs
        loop = leading_loop()
        for _ in range(5):
            loop.step()  # the next one reserves a minute ahead and holds the slot
    assert Job.objects.get(pk=first.id).status == Status.COMPLETE
    reserved = Job.objects.filter(tokens_reserved=True)
    assert list(reserved.values_list("pk", flat=True)) == [waiting[0].id]


def plan_of_next_jobs(queue: str, takes: dict[str, int]) -> str:
    """The query plan of the statement next_jobs sends, as text."""
    with CaptureQueriesContext(connection) as captured:
        next_jobs({(queue, key): take for key, take in takes.items()})
    (query,) = captured.captured_queries
    explain = "EXPLAIN QUERY PLAN" if connection.vendor == "sqlite" else "EXPLAIN"
    with connection.cursor() as cursor:
        cursor.execute(f"{explain} {query['sql']}")
        return "\n".join(" ".join(map(str, row)) for row in cursor.fetchall())


def test_the_next_jobs_of_a_key_are_the_head_of_the_dispatch_index() -> None:
    """With a backlog whose readiness and arrival disagree (the later a batch arrives, the
    longer its jobs have been ready), the next jobs are still read from the head of the
    index, in its order: no sort of the key's waiting jobs."""
    now = timezone.now()
    for minutes in range(50):
        for priority in (0, -1):
            start_at = now - timedelta(minutes=minutes)
            enqueue_many(
                jobs.add, [[1, 1]] * 100, queue="backlog", priority=priority, start_at=start_at
            )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(Job._meta.db_table)}")
    plan = plan_of_next_jobs("backlog", {"": 10})
    assert "ratequeue_job_ready_by_key" in plan, plan
    if connection.vendor == "sqlite":
        assert "TEMP B-TREE" not in plan, plan
    else:
        assert "Sort" not in plan, plan
    # The head: the job ready longest (of the last batch), the first of its batch.
    (head,) = next_jobs({("backlog", ""): 1})
    oldest = Job.objects.filter(queue="backlog", priority=0).order_by("start_at", "created_at")
    assert (head.pk, head.start_at) == (oldest[0].pk, now - timedelta(minutes=49))

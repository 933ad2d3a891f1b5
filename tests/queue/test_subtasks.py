"""A job waiting on a subtask gives its slots back, and impossible waits are refused."""

from __future__ import annotations

import pytest

from django_ratequeue import JobFailed, enqueue
from django_ratequeue.models import Job
from tests.queue import jobs


def test_waiting_parent_gives_its_slots_to_the_subtask(cluster) -> None:
    # One slot in all, and one in the "solo" queue: the children can only run because
    # their waiting parents give their slots back.
    cluster(workers=3, MAX_CONCURRENCY=1, QUEUES={"solo": {"max_concurrency": 1}})
    same_queue = enqueue(jobs.spawn_and_wait, args=[2, "solo"], queue="solo")
    default = enqueue(jobs.spawn_and_wait, args=[3])
    assert same_queue.result(timeout=60) == 40
    assert default.result(timeout=60) == 60
    children = Job.objects.filter(parent_id__in=[same_queue.id, default.id])
    assert sorted(children.values_list("queue", flat=True)) == ["default", "solo"]


def test_impossible_waits_raise_recursive_wait_deadlock(cluster) -> None:
    cluster(workers=2)
    on_itself = enqueue(jobs.wait_on_self, retries=3)
    on_paused = enqueue(jobs.spawn_and_wait, args=[1, {"name": "frozen", "max_concurrency": 0}])
    for handle in (on_itself, on_paused):
        with pytest.raises(JobFailed, match="RecursiveWaitDeadlock"):
            handle.result(timeout=60)
    assert len(on_itself.attempts()) == 1  # not retried: it would deadlock again


def test_same_queue_waits_lend_at_most_the_queue_limit(cluster) -> None:
    # "solo" runs one job at a time: the parent may lend its slot to its child, but the
    # child cannot lend the same slot again to a grandchild.
    cluster(workers=3, QUEUES={"solo": {"max_concurrency": 1}})
    nested = enqueue(jobs.spawn_nested, args=["solo"], queue="solo", retries=0)
    with pytest.raises(JobFailed, match=r"'solo', whose 1 slot\(s\) are all lent"):
        nested.result(timeout=60)


def test_wait_with_no_worker_left_to_run_the_subtask(cluster) -> None:
    cluster(workers=1, SLOTS=1)  # its one slot waits: no slot is left for the subtask
    parent = enqueue(jobs.spawn_and_wait, args=[5], retries=0)
    with pytest.raises(JobFailed, match="every worker is blocked"):
        parent.result(timeout=60)

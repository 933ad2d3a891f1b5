"""Concurrency keys (reference 003): each key is its own copy of the queue, with the
queue's max_concurrency; total_concurrency caps all keys of the queue together. Run step
by step with the loop in this process, counting the attempts each step starts."""

from __future__ import annotations

from collections import Counter

import pytest
from django.test import override_settings

from django_ratequeue import RecursiveWaitDeadlock
from django_ratequeue.engine.models import Wait
from django_ratequeue.engine.subtasks import check_wait
from django_ratequeue.models import Attempt, Job
from tests.queue.backlog import waiting
from tests.queue.steps import leading_loop


def started_per_key() -> Counter[str]:
    """One loop step; the attempts it started, per concurrency key."""
    leading_loop().step()
    running = Attempt.objects.filter(active=True, ended_at=None)
    return Counter(running.values_list("concurrency_key", flat=True))


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"tenants": {"max_concurrency": 2}}})
def test_each_key_runs_the_queues_max_concurrency() -> None:
    waiting("tenants", ["a", "b", "c"], per_key=3)
    assert started_per_key() == {"a": 2, "b": 2, "c": 2}


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"tenants": {"max_concurrency": 2}}})
def test_jobs_without_a_key_are_one_copy_of_the_queue() -> None:
    waiting("tenants", ["", "a"], per_key=3)
    assert started_per_key() == {"": 2, "a": 2}


@pytest.mark.django_db
@override_settings(
    RATEQUEUE={"QUEUES": {"tenants": {"max_concurrency": 2, "total_concurrency": 3}}}
)
def test_total_concurrency_caps_all_keys_together() -> None:
    waiting("tenants", ["a", "b", "c"], per_key=3)
    first = started_per_key()
    assert sum(first.values()) == 3 and max(first.values()) == 1  # keys take turns
    assert started_per_key() == first  # nothing more while the three run


@pytest.mark.django_db
@override_settings(
    RATEQUEUE={"MAX_CONCURRENCY": 300, "QUEUES": {"tenants": {"max_concurrency": 1}}}
)
def test_without_total_concurrency_keys_are_not_capped_together() -> None:
    """Not even by MAX_QUEUE_CONCURRENCY (100), which bounds a limit, not the keys' sum."""
    waiting("tenants", [f"k{n}" for n in range(150)], per_key=2)
    assert started_per_key() == {f"k{n}": 1 for n in range(150)}


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"solo": {"max_concurrency": 1}}})
def test_a_key_lending_its_slot_does_not_refuse_a_wait_in_another_key() -> None:
    """Key "a"'s one slot is lent to its parent's subtask; key "b" still has its own."""
    waiting("solo", ["a", "b"], per_key=2)
    started_per_key()  # job-a-0 and job-b-0 run
    lender = Attempt.objects.get(job_id="job-a-0")
    lender.wait, lender.wait_queue = Wait.WAITING, "solo"
    lender.save()
    parent = Attempt.objects.get(job_id="job-b-0")
    check_wait(parent, Job.objects.get(pk="job-b-1"))  # b's slot is its own: no deadlock
    with pytest.raises(RecursiveWaitDeadlock, match="slot\\(s\\) are all lent"):
        check_wait(parent, Job.objects.get(pk="job-a-1"))

"""Limits changed while the app runs: at enqueue (``queue={"name", "max_concurrency"}``)
and at runtime (``MAX_CONCURRENCY``). Run step by step with the loop in this process,
counting the attempts each step starts."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_ratequeue import enqueue, enqueue_many
from django_ratequeue.models import Attempt, QueueSetting
from django_ratequeue.queue.limits import QueueLimits
from django_ratequeue.queue.loop import Loop
from django_ratequeue.queue.wakeup import ensure_loop_state
from tests.queue import jobs


def started_after_a_step() -> int:
    Loop(ensure_loop_state()[0]).step()
    return Attempt.objects.filter(active=True, ended_at=None).count()


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"reports": {"max_concurrency": 1}}})
def test_a_limit_given_at_enqueue_applies_to_a_configured_queue() -> None:
    for _ in range(3):
        enqueue(jobs.add, args=[1, 2], queue={"name": "reports", "max_concurrency": 3})
    assert started_after_a_step() == 3
    assert QueueLimits.of("reports").source == "runtime"


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"reports": {"max_concurrency": 1}}})
def test_a_limit_given_to_enqueue_many_applies_too() -> None:
    enqueue_many(jobs.add, [[1, 2]] * 4, queue={"name": "reports", "max_concurrency": 2})
    assert started_after_a_step() == 2
    assert QueueSetting.objects.get(name="reports").max_concurrency == 2


@pytest.mark.django_db
def test_a_refused_enqueue_changes_no_limit() -> None:
    with pytest.raises(ValueError):
        enqueue(jobs.add, args=[float("nan")], queue={"name": "reports", "max_concurrency": 3})
    with pytest.raises(ValueError):
        enqueue(jobs.add, args=[1, 2], queue={"name": "reports", "max_concurrency": 1e308})
    assert not QueueSetting.objects.exists()

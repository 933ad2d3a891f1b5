"""Limits changed while the app runs: at enqueue (``queue={"name", "max_concurrency"}``)
and at runtime (``MAX_CONCURRENCY``). Run step by step with the loop in this process,
counting the attempts each step starts."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ratequeue import enqueue, enqueue_many, set_max_concurrency
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.control import change_queue
from django_ratequeue.engine.limits import QueueLimits
from django_ratequeue.engine.loop import Loop
from django_ratequeue.engine.models import queue_db
from django_ratequeue.models import Attempt, QueueSetting, RuntimeLimits
from tests.queue import jobs
from tests.queue.steps import leading_loop


def started_after_a_step() -> int:
    leading_loop().step()
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
        enqueue(jobs.add, args=[float("nan"), 1], queue={"name": "reports", "max_concurrency": 3})
    with pytest.raises(ValueError):
        enqueue(jobs.add, args=[1, 2], queue={"name": "reports", "max_concurrency": 1e308})
    assert not QueueSetting.objects.exists()


def waiting_jobs(count: int, queue: str = "default", key: str = "") -> None:
    enqueue_many(jobs.add, [[1, 2]] * count, queue=queue, concurrency_key=key)


@pytest.mark.django_db
@override_settings(RATEQUEUE={"MAX_CONCURRENCY": 2})
def test_max_concurrency_changes_at_runtime() -> None:
    waiting_jobs(6)
    assert started_after_a_step() == 2
    set_max_concurrency(5)
    assert started_after_a_step() == 5
    set_max_concurrency(None)  # back to the setting: the five run on, nothing more starts
    assert started_after_a_step() == 5
    assert RuntimeLimits.objects.get().max_concurrency is None


@pytest.mark.django_db
def test_a_hostile_max_concurrency_is_refused_and_nothing_written() -> None:
    for hostile in [0, -1, 2**31, 1e308, float("inf"), float("nan"), True, "3"]:
        with pytest.raises(ValueError, match="MAX_CONCURRENCY"):
            set_max_concurrency(hostile)  # type: ignore[arg-type]
    assert not RuntimeLimits.objects.exclude(max_concurrency=None).exists()


@pytest.mark.django_db
def test_max_concurrency_from_the_command() -> None:
    out = StringIO()
    call_command("ratequeue_queue", "max-concurrency", "7", stdout=out)
    assert "MAX_CONCURRENCY 7." in out.getvalue()
    with pytest.raises(CommandError):
        call_command("ratequeue_queue", "max-concurrency", "inf")
    call_command("ratequeue_queue", "max-concurrency", "reset", stdout=out)
    setting = ratequeue_settings().MAX_CONCURRENCY
    assert out.getvalue().endswith(f"MAX_CONCURRENCY {setting}.\n")


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"tenants": {"max_concurrency": 2}}})
def test_total_concurrency_changes_at_runtime() -> None:
    for key in "abc":
        waiting_jobs(2, queue="tenants", key=key)
    change_queue("tenants", total_concurrency=3)
    assert started_after_a_step() == 3
    with pytest.raises(ValueError, match="total_concurrency"):
        change_queue("tenants", total_concurrency=float("nan"))
    call_command("ratequeue_queue", "total", "tenants", "5", stdout=StringIO())
    assert started_after_a_step() == 5
    call_command("ratequeue_queue", "reset", "tenants", stdout=StringIO())
    assert not QueueSetting.objects.exists()


def started_by(loop: Loop) -> int:
    loop.step()
    return Attempt.objects.filter(active=True, ended_at=None).count()


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"reports": {"max_concurrency": 1}}})
def test_one_loop_sees_every_runtime_change_of_a_queue() -> None:
    """However it is written: by the control function, by a bare UPDATE that leaves
    ``updated_at`` as it was, or by a delete."""
    waiting_jobs(10, queue="reports")
    loop = leading_loop()
    assert started_by(loop) == 1
    change_queue("reports", max_concurrency=3)
    assert started_by(loop) == 3
    QueueSetting.objects.filter(name="reports").update(max_concurrency=5)
    assert started_by(loop) == 5
    change_queue("reports", paused=True)
    QueueSetting.objects.filter(name="reports").update(paused=None, max_concurrency=6)
    assert started_by(loop) == 6
    QueueSetting.objects.all().delete()  # back to the setting's 1: nothing more starts
    Attempt.objects.filter(active=True).update(ended_at=timezone.now())
    assert started_by(loop) == 1  # their ends taken in, one started


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"reports": {"max_concurrency": 1}}})
def test_a_step_reads_the_runtime_changes_only_when_they_moved() -> None:
    waiting_jobs(3, queue="reports")
    change_queue("reports", max_concurrency=2)
    loop = leading_loop()
    table = QueueSetting._meta.db_table
    reads = f'SELECT "{table}"."name"'

    def step_reads() -> int:
        with CaptureQueriesContext(connections[queue_db()]) as queries:
            loop.step()
        return sum(query["sql"].startswith(reads) for query in queries.captured_queries)

    assert step_reads() == 1
    assert step_reads() == 0
    change_queue("reports", max_concurrency=3)
    assert step_reads() == 1
    assert Attempt.objects.filter(active=True, ended_at=None).count() == 3

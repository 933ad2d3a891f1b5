"""Every job row is created by one path: a callback, a batch's callback and a schedule's run
are announced as an enqueue is, get its checks, and land on their function's own queue."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_ratequeue import Status, batch, enqueue
from django_ratequeue.models import Batch, Job, Schedule
from django_ratequeue.plugins.batches.models import batch_callback_id
from django_ratequeue.plugins.schedules.declarations import run_id
from django_ratequeue.signals import job_enqueued
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop, run_pass

# Real commits: the announcements wait for them.
pytestmark = pytest.mark.django_db(transaction=True)

DECORATED = "tests.queue.jobs.decorated"  # @job(queue="decorated", retries=2, timeout=30)


@pytest.fixture
def enqueued() -> Iterator[list[tuple[str, str, str]]]:
    """Record each ``job_enqueued`` as (job_id, func, queue), in the order received."""
    heard: list[tuple[str, str, str]] = []

    def receiver(sender: Any, job_id: str, func: str, queue: str, **kwargs: Any) -> None:
        heard.append((job_id, func, queue))

    job_enqueued.connect(receiver, weak=False)
    yield heard
    job_enqueued.disconnect(receiver)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = freeze(monkeypatch)
    clock.moment = datetime(2026, 11, 27, 12, 0, 10, tzinfo=UTC)
    return clock


def smaller_arguments(limit: int) -> Any:
    """Lower MAX_ARGUMENTS_BYTES (over the tests' settings) from now on."""
    return override_settings(RATEQUEUE={**settings.RATEQUEUE, "MAX_ARGUMENTS_BYTES": limit})


def test_a_callback_is_announced_and_runs_on_its_own_queue(
    frozen: Clock, enqueued: list[tuple[str, str, str]]
) -> None:
    done = enqueue(jobs.add, args=[1, 2], on_complete=jobs.decorated, owner="ann")
    run_pass()  # runs the job
    run_pass()  # takes its end in, creating the callback

    callback = Job.objects.get(func=DECORATED)
    assert (callback.queue, callback.timeout, callback.owner) == ("decorated", 30, "ann")
    assert callback.retry == jobs.decorated.options.template(DECORATED).retry
    assert callback.args == [
        {"job_id": done.id, "status": "complete", "result": 3, "error": None, "context": None}
    ]
    assert (callback.parent_id, callback.batch_id) == ("", "")
    assert enqueued == [
        (done.id, "tests.queue.jobs.add", "default"),
        (callback.id, DECORATED, "decorated"),
    ]


def test_a_callback_whose_outcome_is_out_of_bounds_is_refused_and_logged(
    frozen: Clock, enqueued: list[tuple[str, str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    done = enqueue(jobs.echo, args=["x" * 300], on_complete=jobs.decorated)
    with smaller_arguments(320), caplog.at_level(logging.ERROR, "django_ratequeue.queue"):
        run_pass()
        run_pass()

    assert done.status() == Status.COMPLETE
    assert list(Job.objects.values_list("pk", flat=True)) == [done.id]
    (record,) = [r for r in caplog.records if "was not created" in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert done.id in record.getMessage() and "MAX_ARGUMENTS_BYTES" in record.getMessage()
    assert enqueued == [(done.id, "tests.queue.jobs.echo", "default")]


def test_a_batch_callback_is_announced_and_runs_on_its_own_queue(
    frozen: Clock, enqueued: list[tuple[str, str, str]]
) -> None:
    with batch(on_complete=jobs.decorated, owner="ann") as group:
        member = jobs.add.enqueue(1, 2)
    run_pass()
    run_pass()

    callback = Job.objects.get(pk=batch_callback_id(group.id))
    assert (callback.func, callback.queue, callback.owner) == (DECORATED, "decorated", "ann")
    assert callback.batch_id == ""  # not a job of the batch it reports on
    assert enqueued == [
        (member.id, "tests.queue.jobs.add", "default"),
        (callback.id, DECORATED, "decorated"),
    ]


def test_a_batch_callback_out_of_bounds_is_refused_and_the_batch_finishes_without_one(
    frozen: Clock, enqueued: list[tuple[str, str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    with batch(on_complete=jobs.decorated, context={"note": "x" * 300}) as group:
        member = jobs.add.enqueue(1, 2)
    with smaller_arguments(300), caplog.at_level(logging.ERROR, "django_ratequeue.queue"):
        run_pass()
        run_pass()

    row = Batch.objects.get(pk=group.id)
    assert row.finished_at is not None and row.callback_id == ""
    assert list(Job.objects.values_list("pk", flat=True)) == [member.id]
    assert any(
        group.id in r.getMessage() and "MAX_ARGUMENTS_BYTES" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
    )
    assert enqueued == [(member.id, "tests.queue.jobs.add", "default")]


def schedules(**declared: dict[str, Any]) -> Any:
    """Declare schedules in the settings (over the tests' own)."""
    return override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": declared})


def test_a_schedule_run_is_announced_and_runs_on_its_function_or_its_own_queue(
    frozen: Clock, enqueued: list[tuple[str, str, str]]
) -> None:
    nightly = {"function": DECORATED, "every": 60, "args": [1]}
    moved = {**nightly, "options": {"queue": "elsewhere"}}
    with schedules(nightly=nightly, moved=moved):
        loop = leading_loop()
        loop.step()
        frozen.advance(50)  # 12:01:00
        loop.step()

    at = datetime(2026, 11, 27, 12, 1, tzinfo=UTC)
    runs = {name: Job.objects.get(pk=run_id(name, at)) for name in ("nightly", "moved")}
    assert runs["nightly"].queue == "decorated" and runs["moved"].queue == "elsewhere"
    assert runs["nightly"].timeout == 30
    assert sorted(enqueued) == sorted(
        [
            (runs["nightly"].id, DECORATED, "decorated"),
            (runs["moved"].id, DECORATED, "elsewhere"),
        ]
    )


def test_a_schedule_run_out_of_bounds_is_refused_and_counted_skipped(
    frozen: Clock, enqueued: list[tuple[str, str, str]]
) -> None:
    echo = {"function": "tests.queue.jobs.echo", "every": 60, "args": ["x" * 300]}
    with schedules(echo=echo):
        loop = leading_loop()
        loop.step()
        frozen.advance(50)
        with smaller_arguments(200):
            loop.step()

    row = Schedule.objects.get(pk="echo")
    assert row.skipped == 1 and row.runs == 0
    assert "MAX_ARGUMENTS_BYTES" in row.last_error
    assert not Job.objects.exists() and enqueued == []

"""The lifecycle's signals and log records: each event once, in order, after its commit,
with its arguments; a receiver that raises stops nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from django_ratequeue import Status, enqueue, enqueue_many
from django_ratequeue.signals import (
    SIGNALS,
    attempt_finished,
    attempt_started,
    job_enqueued,
    job_finished,
)
from tests.queue import jobs
from tests.queue.steps import freeze, run_pass

# Real commits: the announcements wait for them.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Record every lifecycle signal as (event, arguments), in the order received."""
    events: list[tuple[str, dict[str, Any]]] = []
    receivers = {}
    for name, signal in SIGNALS.items():

        def receiver(sender: Any, signal: Any = None, _name: str = name, **kwargs: Any) -> None:
            assert sender == kwargs["func"]
            events.append((_name, kwargs))

        receivers[name] = receiver
        signal.connect(receiver, weak=False)
    yield events
    for name, signal in SIGNALS.items():
        signal.disconnect(receivers[name])


def of_job(events: list[tuple[str, dict[str, Any]]], job_id: str) -> list[str]:
    return [name for name, kwargs in events if kwargs["job_id"] == job_id]


def test_each_job_is_announced_in_order_with_its_arguments(
    monkeypatch: pytest.MonkeyPatch, heard: list[tuple[str, dict[str, Any]]]
) -> None:
    frozen = freeze(monkeypatch)
    quick: Any = {"retry_count": 1, "initial_interval": 1, "randomize_interval": False}
    done = enqueue(jobs.add, args=[1, 2], queue="a")
    failed = enqueue(jobs.fail, retries=quick, queue="b")
    canceled = enqueue(jobs.add, args=[1, 1], run_after=600)
    run_pass()
    canceled.cancel()
    for _ in range(5):
        frozen.advance(1.5)
        run_pass()
    assert failed.status() == Status.FAILED and done.status() == Status.COMPLETE

    assert of_job(heard, done.id) == [
        "job_enqueued",
        "attempt_started",
        "attempt_finished",
        "job_finished",
    ]
    assert of_job(heard, failed.id) == [
        "job_enqueued",
        *["attempt_started", "attempt_finished"] * 2,
        "job_finished",
    ]
    assert of_job(heard, canceled.id) == ["job_enqueued", "job_finished"]
    arguments = {(name, kwargs["job_id"]): kwargs for name, kwargs in heard}
    assert arguments["job_enqueued", done.id] == {
        "job_id": done.id,
        "func": "tests.queue.jobs.add",
        "queue": "a",
    }
    started = arguments["attempt_started", done.id]
    assert started["queue"] == "a" and started["remote"] is False and started["worker"]
    ended = arguments["attempt_finished", failed.id]
    assert (ended["outcome"], ended["queue"], ended["func"]) == (
        "failed",
        "b",
        "tests.queue.jobs.fail",
    )
    assert ended["run_seconds"] >= 0
    assert arguments["job_finished", failed.id]["status"] == "failed"
    assert arguments["job_finished", failed.id]["attempts"] == 2
    assert arguments["job_finished", canceled.id]["status"] == "canceled"


def test_an_enqueue_rolled_back_announces_nothing(
    heard: list[tuple[str, dict[str, Any]]],
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue(jobs.add, args=[1, 2])
        enqueue_many(jobs.add, [[1, 2], [3, 4]])
        assert heard == []  # not before the commit
        raise RuntimeError("the caller's transaction fails")
    assert heard == []
    with transaction.atomic():
        handles = enqueue_many(jobs.add, [[1, 2], [3, 4]])
        assert heard == []
    assert [kwargs["job_id"] for _, kwargs in heard] == [h.id for h in handles]


def test_a_receiver_that_raises_stops_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def broken(sender: Any, **kwargs: Any) -> None:
        raise ValueError("a receiver's bug")

    for signal in (job_enqueued, attempt_started, attempt_finished, job_finished):
        signal.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR, logger="django.dispatch"):
            handle = enqueue(jobs.add, args=[2, 3])
            run_pass()
            run_pass()
    finally:
        for signal in (job_enqueued, attempt_started, attempt_finished, job_finished):
            signal.disconnect(broken)
    assert handle.result(timeout=0) == 5
    raised = [r for r in caplog.records if r.name == "django.dispatch"]
    assert len(raised) == 4 and all("a receiver's bug" in str(r.exc_info) for r in raised)


def test_log_records_carry_the_fields(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="django_ratequeue.lifecycle"):
        handle = enqueue(jobs.add, args=[2, 3], queue="logged")
        run_pass()
        run_pass()
    records = [r for r in caplog.records if getattr(r, "job_id", None) == handle.id]
    assert [r.event for r in records] == [  # type: ignore[attr-defined]
        "job_enqueued",
        "attempt_started",
        "attempt_finished",
        "job_finished",
    ]
    assert {r.queue for r in records} == {"logged"}  # type: ignore[attr-defined]
    assert records[2].outcome == "succeeded"  # type: ignore[attr-defined]

"""A wait that times out says when no worker is alive to run the job, and how to start one:
the heartbeats of django-q2's worker processes, or a remote queue's workers' keys."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F

from django_ratequeue import enqueue
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.workerkeys import create_key, seen
from django_ratequeue.models import WorkerHeartbeat
from tests.queue import jobs

pytestmark = pytest.mark.django_db

REMOTE = {"QUEUES": {"gpu": {"max_concurrency": 1, "remote": True}}}


def timeout_message(handle: Any) -> str:
    with pytest.raises(TimeoutError) as waited:
        handle.result(timeout=0.05)
    return str(waited.value)


def test_with_no_worker_alive_the_timeout_says_so_and_how_to_start_one() -> None:
    handle = jobs.add.enqueue(1, 2)
    message = timeout_message(handle)
    assert message.startswith(f"Job {handle.id} did not finish within 0.05 seconds")
    assert "(it is waiting)" in message
    assert "no worker is alive" in message
    assert "python manage.py qcluster" in message


@pytest.mark.django_db(transaction=True)  # aresult reads in a thread of its own
def test_the_async_wait_says_so_too() -> None:
    handle = jobs.add.enqueue(1, 2)
    with pytest.raises(TimeoutError, match="no worker is alive"):
        asyncio.run(handle.aresult(timeout=0.05))


def test_with_a_live_worker_the_timeout_only_says_that_time_ran_out() -> None:
    beat(force=True)  # this process's heartbeat, as a django-q2 worker's agent writes it
    message = timeout_message(jobs.add.enqueue(1, 2))
    assert "did not finish within" in message
    assert "no worker" not in message


def test_a_worker_silent_for_longer_than_worker_dead_after_is_not_alive() -> None:
    beat(force=True)
    WorkerHeartbeat.objects.update(seen_at=F("seen_at") - timedelta(seconds=11))
    assert "no worker is alive" in timeout_message(jobs.add.enqueue(1, 2))


def test_a_remote_queue_looks_for_its_remote_workers(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, **REMOTE}
    beat(force=True)  # local workers do not run a remote queue's jobs
    handle = enqueue(jobs.add, args=[1, 2], queue="gpu")
    message = timeout_message(handle)
    assert "no remote worker that claims from queue 'gpu' has been seen lately" in message
    assert "python -m django_ratequeue.worker" in message

    elsewhere, _key = create_key("cpu box", ["batch"])
    seen(elsewhere)
    assert "no remote worker" in timeout_message(handle)

    row, _key = create_key("gpu box", ["gpu"])
    seen(row)
    assert "no remote worker" not in timeout_message(handle)


def test_the_estimate_says_no_worker_until_one_beats() -> None:
    handle = jobs.add.enqueue(1, 2)
    assert (handle.eta().basis, handle.eta().estimated_start) == ("no_worker", None)
    beat(force=True)
    assert handle.eta().basis == "throughput"


def test_a_remote_queues_estimate_asks_for_its_remote_workers(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, **REMOTE}
    beat(force=True)  # a django-q2 worker does not run a remote queue's jobs
    handle = enqueue(jobs.add, args=[1, 2], queue="gpu")
    assert handle.eta().basis == "no_worker"
    row, _key = create_key("gpu box", ["gpu"])
    seen(row)
    assert handle.eta().basis == "throughput"

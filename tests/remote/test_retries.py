"""A retry prefers another worker: the instance its previous attempt failed (or was lost)
on leaves it to the others for ``RETRY_ELSEWHERE``, then takes it if nobody did."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from rest_framework.test import APIClient

from django_ratequeue import clock, enqueue
from django_ratequeue.engine.bell import bell
from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.models import Attempt, Job
from django_ratequeue.engine.protocol import RETRY_ELSEWHERE
from tests.cluster import wait_for
from tests.remote.test_protocol import claim, dispatch, report

pytestmark = pytest.mark.usefixtures("remote_queues")


def failed_on_w1(worker: APIClient) -> Handle[Any]:
    """A job whose first attempt failed on worker instance ``w1``; its retry is due and
    dispatched, claimable."""
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    dispatch()
    [first] = claim(worker, worker="w1")
    assert report(worker, first["id"], "fail", {"error": "boom"}).status_code == 200
    dispatch()
    Job.objects.filter(pk=handle.id).update(start_at=clock.now() - timedelta(seconds=1))
    dispatch()
    assert Attempt.objects.filter(job_id=handle.id, number=2, worker="").exists()
    return handle


def test_the_retry_goes_to_another_worker(worker: APIClient) -> None:
    handle = failed_on_w1(worker)
    assert claim(worker, worker="w1") == []
    [retry] = claim(worker, worker="w2")
    assert (retry["job_id"], retry["number"]) == (handle.id, 2)


def test_the_failing_worker_takes_other_work_meanwhile(worker: APIClient) -> None:
    failed_on_w1(worker)
    other = enqueue("tests.queue.jobs.add", args=[2, 2], queue="gpu")
    dispatch()
    assert [attempt["job_id"] for attempt in claim(worker, worker="w1")] == [other.id]


def test_the_failing_worker_takes_it_when_nobody_else_did(worker: APIClient) -> None:
    handle = failed_on_w1(worker)
    assert claim(worker, worker="w1") == []
    Attempt.objects.filter(job_id=handle.id, number=2).update(
        dispatched_at=F("dispatched_at") - RETRY_ELSEWHERE
    )
    [retry] = claim(worker, worker="w1")
    assert (retry["job_id"], retry["number"]) == (handle.id, 2)


def test_a_waiting_claim_takes_it_once_left_long_enough(worker: APIClient) -> None:
    """Its claim waits for the moment the retry becomes its own, not for the whole wait."""
    handle = failed_on_w1(worker)
    [retry] = claim(worker, worker="w1", wait=30)
    assert (retry["job_id"], retry["number"]) == (handle.id, 2)
    # The claims' listener stops (closing its connection) once nobody waited for a while.
    wait_for(lambda: bell.thread is None, 10, "the claims' listener to stop")


def test_attempts_name_the_key_and_the_instance(worker: APIClient) -> None:
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker, worker="w" * 32)
    row = Attempt.objects.select_related("worker_key").get(pk=attempt["id"])
    assert (row.worker_key.name, row.worker) == ("gpu box", "w" * 32)
    assert row.worker_label == f"gpu box/{'w' * 32}"

"""Batches over HTTP: the bulk endpoint's batch flag, a batch's detail and cancel, owners only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from django_ratequeue import Status
from django_ratequeue.api import batchevents
from django_ratequeue.models import Batch, Job
from tests.api.conftest import API
from tests.queue.steps import run_pass

pytestmark = pytest.mark.django_db(transaction=True)

GREET = "tests.api.jobs.greet"


def bulk(client: APIClient, **body: object) -> Any:
    items = [{"args": ["Ada"]}, {"args": ["Bob"]}]
    return client.post(
        f"{API}jobs/bulk/", {"function": GREET, "items": items, **body}, format="json"
    )


def test_a_bulk_enqueue_with_batch_makes_one_for_its_owner(api: APIClient, other: APIClient):
    response = bulk(api, batch=True)
    assert response.status_code == 201, response.content
    jobs = response.json()
    batch_id = jobs[0]["batch"]
    assert batch_id and {job["batch"] for job in jobs} == {batch_id}
    assert response["Location"] == f"{API}batches/{batch_id}/"
    detail = api.get(response["Location"]).json()
    assert detail["state"] == "sealed" and detail["progress"] == {"done": 0, "total": 2}
    assert detail["counts"][Status.WAITING] == 2 and detail["outcome"] is None
    assert other.get(response["Location"]).status_code == 404
    assert other.post(f"{response['Location']}cancel/").status_code == 404
    run_pass()
    run_pass()
    detail = api.get(response["Location"]).json()
    assert detail["state"] == "finished"
    assert sorted(detail["outcome"]["succeeded"]) == sorted(job["id"] for job in jobs)


def test_the_outcome_shows_the_ids_the_client_chose(api: APIClient, monkeypatch: Any) -> None:
    monkeypatch.setattr(batchevents, "BATCH_LOOK", 0)
    response = bulk(api, batch=True, options={"id": "quiz-7"})
    assert [job["id"] for job in response.json()] == ["quiz-7-0", "quiz-7-1"]
    run_pass()
    run_pass()

    outcome = api.get(response["Location"]).json()["outcome"]
    stored = Batch.objects.get().outcome
    assert outcome["succeeded"] == ["quiz-7-0", "quiz-7-1"]
    assert stored["succeeded"] != outcome["succeeded"]  # the callback's: the stored ids
    assert outcome == {**stored, "succeeded": outcome["succeeded"]}
    events = api.get(f"{response['Location']}events/", HTTP_ACCEPT="text/event-stream")
    received = [event for chunk in events.streaming_content for event in blocks(chunk)]
    events.close()
    assert received[-1] == ("finished", outcome)


def test_without_the_flag_no_batch_is_made(api: APIClient) -> None:
    response = bulk(api)
    assert response.status_code == 201
    assert {job["batch"] for job in response.json()} == {None}
    assert not Batch.objects.exists()


def test_a_refused_bulk_enqueue_writes_no_batch(api: APIClient) -> None:
    response = bulk(api, batch=True, options={"queue": "elsewhere"})
    assert response.status_code == 400
    response = api.post(
        f"{API}jobs/bulk/",
        {"function": GREET, "items": [{"args": ["Ada"]}, {"args": [1, 2, 3]}], "batch": True},
        format="json",
    )
    assert response.status_code == 400
    assert not Batch.objects.exists() and not Job.objects.exists()


def test_cancel_cancels_the_batchs_jobs(api: APIClient) -> None:
    response = bulk(api, batch=True, options={"run_after": 3600})
    location = response["Location"]
    canceled = api.post(f"{location}cancel/")
    assert canceled.status_code == 202 and canceled.json()["canceled_at"]
    run_pass()
    detail = api.get(location).json()
    assert detail["state"] == "finished" and len(detail["outcome"]["canceled"]) == 2


def blocks(chunk: bytes) -> list[tuple[str, Any]]:
    """(event, data) of each event in ``chunk``."""
    found = []
    for block in chunk.decode().split("\n\n"):
        fields = dict(line.partition(": ")[::2] for line in block.split("\n") if line)
        if "event" in fields:
            found.append((fields["event"], json.loads(fields["data"])))
    return found


def test_the_events_follow_the_progress_to_the_end(
    api: APIClient, other: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batchevents, "BATCH_LOOK", 0)
    location = bulk(api, batch=True)["Location"]
    assert other.get(f"{location}events/").status_code == 404
    response = api.get(f"{location}events/", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    chunks = iter(response.streaming_content)
    assert next(chunks).startswith(b"retry:")
    [(name, first)] = blocks(next(chunks))
    assert name == "progress" and (first["done"], first["total"]) == (0, 2)
    run_pass()
    run_pass()
    received = [event for chunk in chunks for event in blocks(chunk)]
    response.close()
    assert received[-1][0] == "finished" and len(received[-1][1]["succeeded"]) == 2
    assert (
        "progress",
        {**first, "done": 2, "counts": {**first["counts"], "waiting": 0, "complete": 2}},
    ) in received
    again = api.get(f"{location}events/", HTTP_LAST_EVENT_ID="end")
    assert again.status_code == 204

"""Over HTTP, a job's unique_for (decided by the server) holds per user; clients cannot set it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from django_ratequeue.models import Job
from tests.api.conftest import API, enqueue

pytestmark = pytest.mark.django_db

SUMMARIZE = "tests.api.jobs.summarize"


def test_a_second_enqueue_answers_with_the_first_job(
    api: APIClient, other: APIClient, ada: User
) -> None:
    first = enqueue(api, SUMMARIZE, args=["text"])
    again = enqueue(api, SUMMARIZE, args=["text"])
    assert first.status_code == again.status_code == 201, again.content
    assert again.json() == first.json()
    assert Job.objects.count() == 1
    theirs = enqueue(other, SUMMARIZE, args=["text"])  # another owner: another key
    assert theirs.json()["id"] != first.json()["id"]


def test_bulk_items_claim_their_keys_in_order(api: APIClient) -> None:
    first = enqueue(api, SUMMARIZE, args=["a"]).json()
    response = api.post(
        f"{API}jobs/bulk/",
        {"function": SUMMARIZE, "items": [{"args": ["a"]}, {"args": ["b"]}, {"args": ["b"]}]},
        format="json",
    )
    assert response.status_code == 201, response.content
    ids = [item["id"] for item in response.json()]
    assert ids[0] == first["id"] and ids[1] == ids[2] != ids[0]
    assert Job.objects.count() == 2


@pytest.mark.parametrize("option", ["unique_for", "debounce", "unique_key"])
def test_clients_cannot_set_the_options(api: APIClient, option: str) -> None:
    response = enqueue(api, SUMMARIZE, args=["a"], options={option: 5})
    assert response.status_code == 400
    assert "Decided by the server" in str(response.json()["options"])
    assert not Job.objects.exists()

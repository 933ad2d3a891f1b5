"""A JSON body's values keep their JSON types: a number sent as text, 1 for true or a number
for text is a 400 naming the field, not converted (DRF would convert them, as for forms)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import Job
from tests.api.conftest import API, enqueue

pytestmark = pytest.mark.django_db

GREET = "tests.api.jobs.greet"


@pytest.mark.parametrize(
    ("options", "wrong"),
    [({"run_after": "5"}, "a string"), ({"id": 7}, "a number"), ({"start_at": True}, "a boolean")],
)
def test_an_enqueue_refuses_options_of_the_wrong_json_type(
    api: APIClient, options: dict[str, Any], wrong: str
) -> None:
    response = enqueue(api, GREET, args=["Ada"], options=options)

    assert response.status_code == 400, response.content
    [field] = options
    assert response.json()["options"][field] == [f"Must be {expected(field)}, not {wrong}."]
    assert not Job.objects.exists()
    assert enqueue(api, GREET, args=["Ada"], options={"run_after": 5}).status_code == 201


def expected(field: str) -> str:
    return "a number" if field == "run_after" else "a string"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max": "2"}, "max"),
        ({"wait": "0"}, "wait"),
        ({"running": ["1"]}, "running"),
        ({"queues": [1]}, "queues"),
        ({"reports": [{"id": 1, "action": "fail", "error": "x", "retryable": 1}]}, "reports"),
    ],
)
def test_a_claim_refuses_values_of_the_wrong_json_type(body: dict[str, Any], field: str) -> None:
    _row, key = create_key("typed", ["remote"])
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")

    response = worker.post(f"{API}workers/claim/", {"worker": "w", **body}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()

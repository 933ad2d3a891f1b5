"""GET schema/: DRF's OpenAPI schema of the API, paths under where it is mounted, for
whoever may use the API (a logged-in user, a worker key) and nobody else."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from django_ratequeue.queue.workerkeys import create_key
from tests.api.conftest import API

pytestmark = pytest.mark.django_db


def test_the_schema_describes_every_endpoint(api: APIClient) -> None:
    response = api.get(f"{API}schema/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        f"{API}jobs/",
        f"{API}jobs/bulk/",
        f"{API}jobs/{{job_id}}/",
        f"{API}jobs/{{job_id}}/cancel/",
        f"{API}jobs/{{job_id}}/events/",
        f"{API}ratelimits/{{name}}/",
        f"{API}batches/{{batch_id}}/",
        f"{API}batches/{{batch_id}}/cancel/",
        f"{API}batches/{{batch_id}}/events/",
        f"{API}workers/claim/",
        *(
            f"{API}workers/attempts/{{attempt_id}}/{report}/"
            for report in ("heartbeat", "progress", "output", "complete", "fail", "release")
        ),
    }
    enqueue = schema["paths"][f"{API}jobs/"]["post"]
    body = enqueue["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/Enqueue")
    assert set(schema["components"]["schemas"]["Enqueue"]["properties"]) == {
        "function",
        "args",
        "kwargs",
        "options",
    }
    answer = enqueue["responses"]["201"]["content"]["application/json"]["schema"]["$ref"]
    assert answer.endswith("/Job")
    bulk = schema["paths"][f"{API}jobs/bulk/"]["post"]["responses"]["201"]["content"]
    assert bulk["application/json"]["schema"]["type"] == "array"


def test_the_schema_is_not_shown_to_anonymous_visitors() -> None:
    response = APIClient().get(f"{API}schema/")

    assert response.status_code in (401, 403)
    assert "paths" not in response.json()


def test_a_worker_key_reads_the_schema() -> None:
    _row, key = create_key("gpu box", ["remote"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")

    assert client.get(f"{API}schema/").status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Api-Key 0123abcd.wrong")
    assert client.get(f"{API}schema/").status_code in (401, 403)

"""GET schema/: DRF's OpenAPI schema of the API, paths under where it is mounted, for
whoever may use the API (a logged-in user, a worker key) and nobody else."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from django_ratequeue.api.serializers import bulk_id_max_length
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.ratelimit.config import MAX_TOKENS
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


def operations(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the schema's operations by their ids."""
    return {op["operationId"]: op for ops in schema["paths"].values() for op in ops.values()}


def component(schema: dict[str, Any], operation: dict[str, Any], status: str) -> Any:
    """Return the body schema of ``operation``'s answer ``status``, its reference resolved."""
    body = operation["responses"][status]["content"]["application/json"]["schema"]
    name = body.get("$ref", "").rpartition("/")[2]
    return schema["components"]["schemas"][name] if name else body


@pytest.fixture
def schema(api: APIClient) -> dict[str, Any]:
    return api.get(f"{API}schema/").json()  # type: ignore[no-any-return]


def test_every_operation_states_its_errors_with_the_one_error_body(schema: dict[str, Any]) -> None:
    errors = {"400", "401", "403", "404", "409", "413", "415", "429"}
    for operation_id, operation in operations(schema).items():
        answers = operation["responses"]
        assert {"401"} <= set(answers) and set(answers) & errors, operation_id
        for status in set(answers) & errors:
            assert (
                component(schema, operation, status) == schema["components"]["schemas"]["Error"]
            ), (operation_id, status)
    ops = operations(schema)
    assert {"404", "409", "413", "415", "429"} <= set(ops["enqueueJob"]["responses"])
    assert "409" in ops["heartbeatAttempt"]["responses"]
    assert "Retry-After" in ops["getJob"]["responses"]["429"]["headers"]


def test_the_worker_operations_state_their_real_answers(schema: dict[str, Any]) -> None:
    ops = operations(schema)
    claim = component(schema, ops["claimAttempts"], "200")
    assert set(claim["properties"]) == {"attempts", "lease_seconds", "reports"}
    attempt = claim["properties"]["attempts"]["items"]["properties"]
    assert attempt["output_index"]["type"] == "integer"
    heartbeat = component(schema, ops["heartbeatAttempt"], "200")
    assert set(heartbeat["properties"]) == {"lease_expires_at", "canceled"}
    for report in ("reportAttemptProgress", "appendAttemptOutput", "completeAttempt"):
        assert set(ops[report]["responses"]) >= {"200", "409"}
        assert "201" not in ops[report]["responses"]
        assert set(component(schema, ops[report], "200")["properties"]) == {"ok", "detail"}


def test_results_and_progress_are_any_json(schema: dict[str, Any]) -> None:
    job = schema["components"]["schemas"]["Job"]["properties"]
    for name in ("result", "progress"):
        assert "type" not in job[name] and job[name]["nullable"] is True


def test_patterns_are_ecma_262_and_compile(schema: dict[str, Any]) -> None:
    text = json.dumps(schema)
    for token in (r"\\A", r"\\Z", r"\\z"):
        assert token not in text
    claim = schema["components"]["schemas"]["Claim"]["properties"]
    assert claim["worker"]["pattern"] == "^[A-Za-z0-9_-]{1,32}$"
    for pattern in re.findall(r'"pattern": ("(?:[^"\\]|\\.)*")', text):
        re.compile(json.loads(pattern))


def test_the_constraints_the_server_enforces_are_stated(schema: dict[str, Any]) -> None:
    ops = operations(schema)
    enqueue = schema["components"]["schemas"]["Enqueue"]
    assert enqueue["additionalProperties"] is False
    assert enqueue["properties"]["function"]["minLength"] == 1
    options = enqueue["properties"]["options"]
    assert options["properties"]["id"]["minLength"] == 1
    assert options["properties"]["start_at"]["format"] == "date-time"
    assert options["not"] == {"required": ["start_at", "run_after"]}
    output = schema["components"]["schemas"]["Output"]["properties"]
    assert output["text"]["minLength"] == 1
    assert schema["components"]["schemas"]["Fail"]["properties"]["error"]["minLength"] == 1
    [since] = [p for p in ops["getJob"]["parameters"] if p["name"] == "since"]
    assert since["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**31 - 1, "default": 0}
    [count] = [p for p in ops["getRateLimit"]["parameters"] if p["name"] == "count"]
    assert count["schema"]["exclusiveMinimum"] is True and count["schema"]["minimum"] == 0
    assert count["schema"]["maximum"] == MAX_TOKENS
    bulk = schema["components"]["schemas"]["BulkEnqueue"]["properties"]
    assert bulk["items"]["minItems"] == 1
    assert bulk["options"]["properties"]["id"]["maxLength"] == bulk_id_max_length()
    [job_id] = [p for p in ops["getJob"]["parameters"] if p["name"] == "job_id"]
    assert job_id["schema"]["pattern"] == "^[^/]+$"


def test_only_operations_that_read_a_body_declare_one(schema: dict[str, Any]) -> None:
    ops = operations(schema)
    assert "requestBody" not in ops["cancelJob"] and "requestBody" not in ops["cancelBatch"]
    assert ops["enqueueJob"]["requestBody"]["required"] is True
    assert ops["heartbeatAttempt"]["requestBody"]["required"] is False


def test_the_docs_list_every_operation_with_its_answers(schema: dict[str, Any]) -> None:
    docs = (Path(__file__).parents[2] / "docs" / "http-api.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(GET|POST) (\S+)` \| (.+) \|$", docs, re.MULTILINE)
    listed = {
        name: (method.lower(), f"{API}{path}", set(re.findall(r"\b\d{3}\b", answers)))
        for name, method, path, answers in rows
    }
    stated = {
        op["operationId"]: (method, path, set(op["responses"]))
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
    }
    assert listed == stated


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

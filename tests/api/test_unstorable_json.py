"""JSON no database can store is a 400, not a 500. Nested without end, on every endpoint
that parses a body: the parser stops Python's recursion (100,000 levels), and a body that
parses but nests deeper than any value may is refused before anything reads it. Holding a
lone surrogate (``"\\udce9"`` in JSON, what os.fsdecode() gives for a file name that is not
UTF-8): a 400 naming the field, where PostgreSQL's jsonb used to refuse it with a 500."""

from __future__ import annotations

import json
import os

import pytest
from rest_framework.test import APIClient

from django_ratequeue.api.parsers import MAX_BODY_DEPTH
from django_ratequeue.engine.bounds import MAX_JSON_DEPTH
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import Job
from tests.api.conftest import API
from tests.remote.conftest import keyed

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    "jobs/",
    "jobs/bulk/",
    "workers/claim/",
    *(
        f"workers/attempts/1/{report}/"
        for report in ("heartbeat", "progress", "output", "complete", "fail", "release")
    ),
]


def nested(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.fixture
def clients(api: APIClient) -> dict[str, APIClient]:
    return {"jobs": api, "workers": keyed(create_key("deep", ["gpu"])[1])}


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("body", [nested(100_000), nested(950), nested(MAX_BODY_DEPTH + 1)])
def test_json_nested_past_the_bound_is_a_400(
    clients: dict[str, APIClient], path: str, body: str
) -> None:
    client = clients[path.split("/")[0]]
    response = client.post(f"{API}{path}", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert f"nests lists and objects more than {MAX_BODY_DEPTH} deep" in response.json()["detail"]
    assert not Job.objects.exists()


def test_a_value_nested_past_its_bound_is_a_400_naming_its_field(api: APIClient) -> None:
    deepest = nested(MAX_JSON_DEPTH - 1)
    for args, status in [(f"[{deepest}]", 201), (f"[[{deepest}]]", 400)]:
        body = f'{{"function": "tests.api.jobs.greet", "args": {args}}}'
        response = api.post(f"{API}jobs/", body, content_type="application/json")
        assert response.status_code == status, response.content
    assert f"more than {MAX_JSON_DEPTH} deep" in response.json()["args"][0]
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("jobs/", {"args": [os.fsdecode(b"caf\xe9")]}, "args"),
        ("jobs/", {"args": ["Ada"], "kwargs": {"punctuation": os.fsdecode(b"\xe9")}}, "kwargs"),
        ("jobs/bulk/", {"items": [{"args": ["Ada"]}, {"args": [os.fsdecode(b"\xe9")]}]}, "items"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_field(
    api: APIClient, path: str, body: dict[str, object], field: str
) -> None:
    text = json.dumps({"function": "tests.api.jobs.greet", **body})  # "\\udce9", as sent
    response = api.post(f"{API}{path}", text, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "must be valid Unicode: it holds a lone surrogate" in str(response.json()[field])
    assert not Job.objects.exists()

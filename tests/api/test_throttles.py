"""The HTTP API's per-user throttles, on by default (RATEQUEUE["API_THROTTLES"]): one user
spending their enqueue budget leaves the server's own enqueue() calls and other users
alone; a bulk enqueue draws a token per job."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings
from rest_framework.test import APIClient

from django_ratequeue import enqueue
from django_ratequeue.models import Job
from tests.api.conftest import API
from tests.api.conftest import enqueue as post_job

pytestmark = pytest.mark.django_db

GREET = "tests.api.jobs.greet"


def throttles(**scopes: Any) -> Any:
    return override_settings(
        RATEQUEUE={
            **settings.RATEQUEUE,
            "API_THROTTLES": {"enqueue": None, "read": None, **scopes},
        }
    )


def bulk(client: APIClient, count: int) -> Any:
    items = [{"args": ["Ada"]}] * count
    return client.post(f"{API}jobs/bulk/", {"function": GREET, "items": items}, format="json")


def test_enqueues_are_throttled_per_user_by_default(api: APIClient, other: APIClient) -> None:
    capacity = settings.RATEQUEUE.get("API_THROTTLES", {}).get("enqueue", {}).get("capacity")
    assert capacity is None  # the default applies: the test settings change nothing

    assert bulk(api, 1000).status_code == 201  # the default bucket holds 1,000 jobs
    refused = bulk(api, 50)  # 100 a minute come back: not 50 within seconds

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert post_job(other, GREET, args=["Bob"]).status_code == 201  # Bob's own budget
    enqueue(GREET, args=["the server's own"])  # never refused by a user's budget
    assert Job.objects.count() == 1002


def test_a_bulk_enqueue_draws_a_token_per_job(api: APIClient) -> None:
    with throttles(enqueue={"rate": 1, "period": 3600, "capacity": 5}):
        assert bulk(api, 3).status_code == 201
        refused = bulk(api, 3)
        assert refused.status_code == 429
        assert bulk(api, 2).status_code == 201
        never = bulk(api, 6)
    assert never.status_code == 400
    assert "can never fit" in never.json()["non_field_errors"][0]
    assert Job.objects.count() == 5


def test_reads_are_throttled_per_user(api: APIClient, other: APIClient) -> None:
    job_id = post_job(api, GREET, args=["Ada"]).json()["id"]
    with throttles(read={"rate": 1, "period": 3600, "capacity": 2}):
        codes = [api.get(f"{API}jobs/{job_id}/").status_code for _ in range(3)]
        assert other.get(f"{API}jobs/{job_id}/").status_code == 404  # Bob's own budget
    assert codes == [200, 200, 429]


@pytest.mark.parametrize(
    "value", [{"write": None}, {"enqueue": {"rate": -1, "period": 1}}, [("read", None)]]
)
def test_a_bad_api_throttles_setting_is_a_system_check_error(value: Any) -> None:
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "API_THROTTLES": value}):
        errors = [message.id for message in run_checks()]
    assert "django_ratequeue.E311" in errors

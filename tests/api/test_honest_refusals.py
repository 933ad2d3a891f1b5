"""Honest refusals (issue 36): a request that no limit could ever admit is a 400 that names
the limit and what it holds, not a 429 to retry forever; and a refused request spends
nothing of the user's budgets, the enqueue throttle among them."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from django_ratequeue import get_rate_limit_value, rate_limit
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.models import Job
from tests.api.conftest import API, enqueue

CHARGED = "tests.api.jobs.charged"
BUDGET = {"asker_budget": {"kind": "token bucket", "rate": 200, "period": 600, "capacity": 200}}


@pytest.fixture(autouse=True)
def budget() -> Any:
    limits = {**settings.RATEQUEUE["RATE_LIMITS"], **BUDGET}
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "RATE_LIMITS": limits}):
        yield


def bulk(client: APIClient, items: int, **body: Any) -> Any:
    body = {"function": CHARGED, "items": [{"args": ["hi"]}] * items, **body}
    return client.post(f"{API}jobs/bulk/", body, format="json")


def left(user: User) -> tuple[float, float]:
    """Return what is left of the user's budget and of their enqueue throttle."""
    throttle = ratequeue_settings().API_THROTTLES["enqueue"]
    key = f"user:{user.pk}"
    return (
        get_rate_limit_value("asker_budget", key=key),
        get_rate_limit_value("ratequeue_enqueue", key=key, config=throttle),
    )


def test_a_bulk_its_limit_can_never_hold_is_a_400_that_spends_nothing(
    api: APIClient, ada: User
) -> None:
    before = left(ada)
    refused = bulk(api, 10)  # 400 tokens of a budget that holds 200

    assert refused.status_code == 400, refused.content
    (message,) = refused.json()["non_field_errors"]
    assert "'asker_budget'" in message and "capacity 200" in message
    assert "Retry-After" not in refused
    assert left(ada) == pytest.approx(before, abs=1)
    assert not Job.objects.exists()
    created = bulk(api, 5)  # 200 tokens: the whole budget, once
    assert created.status_code == 201
    assert left(ada) == pytest.approx((before[0] - 200, before[1] - 5), abs=1)


def test_a_bulk_that_fits_later_is_a_429_that_spends_nothing(api: APIClient, ada: User) -> None:
    rate_limit("asker_budget", key=f"user:{ada.pk}", count=160)
    before = left(ada)
    refused = bulk(api, 2)  # 80 tokens: there will be, in a few minutes

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert left(ada) == pytest.approx(before, abs=1)


def test_a_refused_enqueue_spends_nothing_of_the_enqueue_throttle(
    api: APIClient, ada: User
) -> None:
    assert enqueue(api, CHARGED, args=["hi"], options={"id": "mine"}).status_code == 201
    before = left(ada)
    taken = enqueue(api, CHARGED, args=["hi"], options={"id": "mine"})
    wrong = enqueue(api, CHARGED, args=[1, 2, 3])

    assert (taken.status_code, wrong.status_code) == (409, 400)
    assert left(ada) == pytest.approx(before, abs=1)
    assert Job.objects.count() == 1


def test_a_job_whose_cost_its_queue_can_never_hold_is_a_400(api: APIClient) -> None:
    metered = {
        "RATE_LIMITS": {
            "characters": {"kind": "token bucket", "rate": 10, "period": 60, "max_reserved": 5}
        },
        "QUEUES": {"metered": {"max_concurrency": 1, "rate_limit": "characters"}},
    }
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, **metered}):
        refused = enqueue(api, "tests.api.jobs.metered", kwargs={"prompt": "x" * 16})

    assert refused.status_code == 400
    assert "capacity 10 plus max_reserved 5" in refused.json()["non_field_errors"][0]
    assert not Job.objects.exists()


def test_one_call_its_limit_can_never_hold_is_a_400_naming_it(api: APIClient, ada: User) -> None:
    big = {"asker_budget": {**BUDGET["asker_budget"], "capacity": 30}}
    limits = {**settings.RATEQUEUE["RATE_LIMITS"], **big}
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "RATE_LIMITS": limits}):
        refused = enqueue(api, CHARGED, args=["hi"])  # 40 tokens of a budget of 30

    assert refused.status_code == 400
    (message,) = refused.json()["non_field_errors"]
    assert "'asker_budget'" in message and "capacity 30" in message
    assert not Job.objects.exists()

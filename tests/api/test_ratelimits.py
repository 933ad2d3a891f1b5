"""GET ratelimits/<name>/?count=n: a public rate limit as it stands for the requesting user,
keyed by the limit's own rule and never by the request."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from django_ratequeue import rate_limit
from django_ratequeue.checks.config import check_settings
from django_ratequeue.conf import ratequeue_settings
from tests.api.conftest import API

pytestmark = pytest.mark.django_db

PER_USER = {"kind": "token bucket", "rate": 10, "period": 60, "public": True}
SHARED = {"kind": "fixed window", "rate": 5, "period": 3600, "public": True, "key": None}
PRIVATE = {"kind": "token bucket", "rate": 10, "period": 60}


@pytest.fixture(autouse=True)
def limits() -> Any:
    configured = {**settings.RATEQUEUE["RATE_LIMITS"]}
    configured.update(messages=PER_USER, budget=SHARED, secret=PRIVATE)
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "RATE_LIMITS": configured}):
        yield


def value(client: APIClient, name: str, query: str = "") -> Any:
    return client.get(f"{API}ratelimits/{name}/{query}")


def test_a_public_limit_shows_the_users_own_value(api: APIClient, ada: User) -> None:
    rate_limit("messages", key=f"user:{ada.pk}", count=4)

    response = value(api, "messages")

    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "messages"
    assert body["kind"] == "token bucket"
    assert 6 <= body["value"] < 6.1  # refilling at 10 a minute since
    assert (body["capacity"], body["rate"], body["period"]) == (10, 10, 60)
    assert body["max_reserved"] is None
    assert (body["count"], body["ok"], body["retry_at"], body["retry_after"]) == (
        1,
        True,
        None,
        None,
    )
    assert datetime.fromisoformat(body["ts"].replace("Z", "+00:00"))


def test_count_says_when_that_many_tokens_would_be_admitted(api: APIClient, ada: User) -> None:
    rate_limit("messages", key=f"user:{ada.pk}", count=10)

    body = value(api, "messages", "?count=3").json()

    assert body["ok"] is False
    assert body["count"] == 3
    assert 17 < body["retry_after"] <= 18  # 3 tokens at one every 6 s
    assert body["retry_at"] is not None


def test_the_key_comes_from_the_limit_and_never_from_the_request(
    api: APIClient, other: APIClient, ada: User, bob: User
) -> None:
    rate_limit("messages", key=f"user:{bob.pk}", count=10)

    assert value(api, "messages").json()["value"] == 10  # Ada's, not Bob's
    assert value(other, "messages").json()["value"] < 1
    asked = value(api, "messages", f"?key=user:{bob.pk}")
    assert asked.status_code == 400
    assert "the key comes from the server" in asked.json()["key"][0]


def test_a_shared_limit_shows_one_value_to_everybody(api: APIClient, other: APIClient) -> None:
    rate_limit("budget", count=2)
    assert value(api, "budget").json()["value"] == value(other, "budget").json()["value"] == 3


@pytest.mark.parametrize("name", ["secret", "unknown", "%s", "x" * 300])
def test_a_limit_that_is_not_public_is_404(api: APIClient, name: str) -> None:
    response = value(api, name)
    assert response.status_code == 404


@pytest.mark.parametrize("count", ["0", "-1", "nan", "inf", "1e999", "abc", "11"])
def test_a_bad_count_is_400(api: APIClient, count: str) -> None:
    response = value(api, "messages", f"?count={count}")
    assert response.status_code == 400
    assert "count" in response.json()


def test_anonymous_visitors_are_refused_by_default() -> None:
    assert value(APIClient(), "budget").status_code in (401, 403)


def test_a_per_user_limit_needs_a_user_even_when_anonymous_visitors_are_allowed() -> None:
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "API_ALLOW_ANONYMOUS": True}):
        configured = {**settings.RATEQUEUE["RATE_LIMITS"], "budget": SHARED, "messages": PER_USER}
        with override_settings(RATEQUEUE={**settings.RATEQUEUE, "RATE_LIMITS": configured}):
            assert value(APIClient(), "budget").status_code == 200
            assert value(APIClient(), "messages").status_code in (401, 403)


def test_public_limits_and_their_key_rules_are_read_from_settings() -> None:
    public = ratequeue_settings().PUBLIC_RATE_LIMITS
    assert public["messages"] == "user"
    assert public["budget"] is None
    assert "secret" not in public


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"public": "yes"}, "['public'] must be True or False"),
        ({"key": "user"}, "['key'] is the key rule of a public limit"),
        ({"public": True, "key": "header:X-User"}, "must be None (one value for everybody)"),
        ({"public": True, "key": 3}, "must be None (one value for everybody)"),
    ],
)
def test_a_bad_public_entry_is_reported_by_the_checks(entry: dict[str, Any], message: str) -> None:
    limits = {"bad": {**PRIVATE, **entry}}
    with override_settings(RATEQUEUE={"RATE_LIMITS": limits}):
        errors = check_settings()
    assert [error.id for error in errors] == ["django_ratequeue.E106"]
    assert message in errors[0].msg

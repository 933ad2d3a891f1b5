"""Keyed rate limits (plan tiers) through every caller: the view decorator, the DRF
throttle, the HTTP API's public limits, the admin, ``manage.py ratelimits``, the
dashboard's figures and the system checks. Each resolves the limit for its own key."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings
from rest_framework.test import APIClient

from django_ratequeue import rate_limit
from django_ratequeue.checks.config import check_per_key_rate_limits, check_settings
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.decorators import ratelimit
from django_ratequeue.monitor.ratelimits import rate_limit_uses
from django_ratequeue.ratelimit.config import parse_limit
from django_ratequeue.ratelimit.status import describe, keys_now
from tests.api.conftest import API
from tests.ratelimit import plans

pytestmark = pytest.mark.django_db

PLAN_LIMIT = "tests.ratelimit.plans.plan_limit"
rf = RequestFactory()


@pytest.fixture(autouse=True)
def tenant_plans() -> Iterator[None]:
    plans.PLANS.clear()
    plans.PLANS.update({"acme": "pro"})
    yield
    plans.PLANS.clear()


def team_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@override_settings(RATEQUEUE={"RATE_LIMITS": {"llm": {"per_key": PLAN_LIMIT}}})
def test_the_view_decorator_limits_each_team_by_its_plan() -> None:
    view = ratelimit("llm", key=lambda request: request.headers.get("X-Team"))(team_view)
    tiny = [view(rf.get("/", HTTP_X_TEAM="tiny")) for _ in range(3)]
    assert [r.status_code for r in tiny] == [200, 200, 429]
    assert tiny[0]["RateLimit-Limit"] == "2"
    acme = view(rf.get("/", HTTP_X_TEAM="acme"))
    assert acme.status_code == 200
    assert (acme["RateLimit-Limit"], acme["RateLimit-Remaining"]) == ("20", "19")
    assert acme["RateLimit-Policy"] == "10;w=3600;burst=20"


@pytest.mark.urls("tests.integration.drf_urls")
def test_the_drf_throttle_limits_each_user_by_their_plan() -> None:
    alice = User.objects.create(username="alice")
    plans.PLANS[f"user:{alice.pk}"] = "pro"
    client = APIClient()
    client.force_authenticate(alice)
    anonymous = APIClient()
    with override_settings(RATEQUEUE={"RATE_LIMITS": {"api_calls": {"per_key": PLAN_LIMIT}}}):
        assert [anonymous.get("/configured/").status_code for _ in range(3)] == [200, 200, 429]
        assert [client.get("/configured/").status_code for _ in range(20)] == [200] * 20
        assert client.get("/configured/").status_code == 429


def test_a_public_keyed_limit_shows_the_users_own_plan() -> None:
    ada = User.objects.create_user("ada", password="secret")
    plans.PLANS[f"user:{ada.pk}"] = "pro"
    public = {"per_key": PLAN_LIMIT, "public": True}
    client = APIClient()
    client.force_login(ada)
    limits = {**settings.RATEQUEUE["RATE_LIMITS"], "plan": public}
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "RATE_LIMITS": limits}):
        body = client.get(f"{API}ratelimits/plan/").json()
        assert (body["capacity"], body["rate"], body["value"]) == (20, 10, 20)
        plans.PLANS[f"user:{ada.pk}"] = "free"
        body = client.get(f"{API}ratelimits/plan/").json()
        assert (body["capacity"], body["rate"], body["value"]) == (2, 2, 2)


@override_settings(RATEQUEUE={"RATE_LIMITS": {"llm": {"per_key": PLAN_LIMIT}}})
def test_the_admin_shows_each_row_under_its_keys_plan(admin_client: Any) -> None:
    rate_limit("llm", key="acme", count=5)
    rate_limit("llm", key="tiny", count=1)
    page = admin_client.get("/admin/django_ratequeue/ratelimitstate/").content.decode()
    assert f"per key: {PLAN_LIMIT} → token bucket: 10 per hour, capacity 20" in page
    assert f"per key: {PLAN_LIMIT} → token bucket: 2 per hour" in page
    # 20 - 5 and 2 - 1, plus what refilled since (10 and 2 an hour)
    assert 'field-value_now">15.0' in page and 'field-value_now">1.0' in page


@override_settings(RATEQUEUE={"RATE_LIMITS": {"llm": {"per_key": PLAN_LIMIT}}})
def test_the_command_shows_each_row_under_its_keys_plan() -> None:
    rate_limit("llm", key="acme", count=5)
    out = StringIO()
    call_command("ratelimits", "show", "llm", stdout=out)
    assert f"llm: per key: {PLAN_LIMIT}" in out.getvalue()
    assert "key acme  shard 0  15.0" in out.getvalue()
    listed = StringIO()
    call_command("ratelimits", "list", stdout=listed)
    assert f"per key: {PLAN_LIMIT}" in listed.getvalue()


@override_settings(RATEQUEUE={"RATE_LIMITS": {"llm": {"per_key": PLAN_LIMIT}}})
def test_the_dashboard_counts_keys_out_of_tokens_under_their_own_plans() -> None:
    plans.CALLS.clear()  # what earlier tests asked of the plan function
    rate_limit("llm", key="acme", count=2)  # 18 of 20 left: not out
    rate_limit("llm", key="tiny", count=2)  # 0 of 2 left: out
    (use,) = rate_limit_uses({})
    assert use.keyed and use.text == f"per key: {PLAN_LIMIT}"
    assert (use.keys.keys, use.keys.out_of_tokens) == (2, 1)
    # Nothing drew on it without a key: the function is not asked for None (a plan
    # function need not answer it), on a page that renders every few seconds.
    assert (use.value, use.capacity, use.without_key) == (0, 0, False)
    assert None not in plans.CALLS
    assert keys_now("llm", ratequeue_settings().RATE_LIMITS["llm"], 10).out_of_tokens == 1
    rate_limit("llm")  # the key None: the free plan's
    (use,) = rate_limit_uses({})
    assert (round(use.value, 2), use.capacity, use.without_key) == (1, 2, True)  # + a refill


def test_describe_names_the_function_and_the_shards() -> None:
    keyed = parse_limit({"per_key": PLAN_LIMIT, "shards": 4})
    assert describe(keyed) == f"per key: {PLAN_LIMIT}, 4 shards"


# --- system checks ------------------------------------------------------------------------


def errors(limits: Any, check: Any) -> list[tuple[str, str]]:
    with override_settings(RATEQUEUE={"RATE_LIMITS": limits}):
        return [(error.id or "", error.msg) for error in check()]


def test_a_good_per_key_limit_passes_the_checks() -> None:
    limits = {"llm": {"per_key": PLAN_LIMIT, "shards": 2}}
    assert errors(limits, check_settings) == errors(limits, check_per_key_rate_limits) == []


@pytest.mark.parametrize(
    ("path", "check_id", "says"),
    [
        ("tests.ratelimit.nowhere.plan", "E107", "cannot be imported: ModuleNotFoundError"),
        ("tests.ratelimit.plans.nope", "E107", "cannot be imported: ImportError"),
        ("nodots", "E107", "cannot be imported"),
        ("tests.ratelimit.plans.NOT_CALLABLE", "E108", "is not callable (a int)"),
    ],
)
def test_a_per_key_path_must_import_and_be_callable(path: str, check_id: str, says: str) -> None:
    [(error_id, message)] = errors({"llm": {"per_key": path}}, check_per_key_rate_limits)
    assert error_id == f"django_ratequeue.{check_id}"
    assert 'RATEQUEUE["RATE_LIMITS"][\'llm\']["per_key"]' in message and says in message


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        ({"per_key": 42}, "must be a callable"),
        ({"per_key": ""}, "must be a callable"),
        ({"per_key": PLAN_LIMIT, "shards": 0}, "shards must be an integer"),
        ({"per_key": PLAN_LIMIT, "rate": 3}, "Unknown key(s) 'rate'"),
    ],
)
def test_a_malformed_per_key_limit_is_e103(limit: Any, says: str) -> None:
    [(error_id, message)] = errors({"llm": limit}, check_settings)
    assert error_id == "django_ratequeue.E103" and says in message


def test_a_queue_may_be_gated_by_a_per_key_limit() -> None:
    gated = {
        "RATE_LIMITS": {"llm": {"per_key": PLAN_LIMIT}},
        "QUEUES": {"ask": {"rate_limit": "llm"}},
    }
    with override_settings(RATEQUEUE=gated):
        assert check_settings() == []

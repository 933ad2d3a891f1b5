"""RateLimitThrottle through DRF's request cycle: 429, Retry-After, scopes and keys."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from rest_framework.test import APIClient

from django_ratequeue.contrib.drf import parse_drf_rate
from django_ratequeue.ratelimit.config import TokenBucket

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.integration.drf_urls")]

API_CALLS = {"api_calls": {"kind": "token bucket", "rate": 2, "period": 60}}
DRF_RATES = {
    "DEFAULT_THROTTLE_CLASSES": ["django_ratequeue.contrib.drf.RateLimitThrottle"],
    "DEFAULT_THROTTLE_RATES": {"drf_rate": "2/minute", "anon": "1/hour"},
}


def statuses(client: APIClient, url: str, times: int) -> list[int]:
    return [client.get(url).status_code for _ in range(times)]


@override_settings(RATEQUEUE={"RATE_LIMITS": API_CALLS})
def test_scope_named_in_rate_limits_throttles_with_retry_after() -> None:
    client = APIClient()

    assert statuses(client, "/configured/", 2) == [200, 200]
    refused = client.get("/configured/")

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 30  # a token every 30 s, rounded up
    assert "throttled" in refused.json()["detail"].lower()


@override_settings(REST_FRAMEWORK=DRF_RATES)
def test_drf_rate_string_in_default_throttle_rates() -> None:
    client = APIClient()

    assert statuses(client, "/drf-rate/", 3) == [200, 200, 429]
    assert statuses(client, "/unscoped/", 5) == [200] * 5


@override_settings(REST_FRAMEWORK=DRF_RATES)
def test_each_user_and_each_address_has_its_own_limit() -> None:
    alice = APIClient()
    alice.force_authenticate(User.objects.create(username="alice"))
    elsewhere = APIClient(REMOTE_ADDR="192.0.2.7")

    assert statuses(APIClient(), "/drf-rate/", 3) == [200, 200, 429]
    assert statuses(alice, "/drf-rate/", 3) == [200, 200, 429]
    assert statuses(elsewhere, "/drf-rate/", 3) == [200, 200, 429]


@override_settings(REST_FRAMEWORK=DRF_RATES)
def test_anon_throttle_leaves_authenticated_users_alone() -> None:
    alice = APIClient()
    alice.force_authenticate(User.objects.create(username="alice"))

    assert statuses(APIClient(), "/anon/", 2) == [200, 429]
    assert statuses(alice, "/anon/", 3) == [200, 200, 200]


@override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {}})
def test_unknown_scope_says_where_to_configure_it() -> None:
    with pytest.raises(ImproperlyConfigured, match="DEFAULT_THROTTLE_RATES"):
        APIClient().get("/configured/")


def test_drf_rates_become_token_buckets() -> None:
    assert parse_drf_rate("100/hour") == TokenBucket(rate=100, period=3600)
    assert parse_drf_rate("5/s") == TokenBucket(rate=5, period=1)
    with pytest.raises(ImproperlyConfigured, match="'100/fortnight'"):
        parse_drf_rate("100/fortnight")

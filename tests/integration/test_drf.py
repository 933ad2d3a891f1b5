"""RateLimitThrottle through DRF's request cycle: 429, Retry-After, scopes and keys."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from rest_framework.test import APIClient

from django_ratequeue.contrib.drf import parse_drf_rate
from django_ratequeue.models import RateLimitState
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


@override_settings(REST_FRAMEWORK=DRF_RATES)
def test_forged_forwarded_for_does_not_make_new_clients() -> None:
    """Six forged X-Forwarded-For values used to get six limits: without NUM_PROXIES
    only REMOTE_ADDR counts."""
    client = APIClient()
    codes = [
        client.get("/drf-rate/", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code
        for i in range(6)
    ]

    assert codes == [200, 200, 429, 429, 429, 429]
    assert list(RateLimitState.objects.values_list("key", flat=True)) == ["ip:127.0.0.1"]


@override_settings(REST_FRAMEWORK={**DRF_RATES, "NUM_PROXIES": 1})
def test_an_over_long_forwarded_address_is_hashed_not_a_server_error() -> None:
    client = APIClient()
    forged = "x" * 10_000_000

    assert statuses_with(client, "/drf-rate/", 3, HTTP_X_FORWARDED_FOR=forged) == [200, 200, 429]
    [key] = RateLimitState.objects.values_list("key", flat=True)
    assert key.startswith("ip:sha256:") and len(key) < 100


@override_settings(REST_FRAMEWORK=DRF_RATES)
def test_ipv4_mapped_addresses_are_keyed_as_ipv4() -> None:
    assert statuses(APIClient(REMOTE_ADDR="::ffff:192.0.2.1"), "/drf-rate/", 2) == [200, 200]
    assert statuses(APIClient(REMOTE_ADDR="::ffff:192.0.2.2"), "/drf-rate/", 2) == [200, 200]
    assert statuses(APIClient(REMOTE_ADDR="192.0.2.1"), "/drf-rate/", 1) == [429]
    assert statuses(APIClient(REMOTE_ADDR="2001:db8::1"), "/drf-rate/", 2) == [200, 200]
    assert statuses(APIClient(REMOTE_ADDR="2001:db8::2"), "/drf-rate/", 1) == [429]


def statuses_with(client: APIClient, url: str, times: int, **extra: str) -> list[int]:
    return [client.get(url, **extra).status_code for _ in range(times)]


@override_settings(REST_FRAMEWORK=DRF_RATES)
def test_responses_carry_the_ratelimit_headers_like_the_decorator() -> None:
    client = APIClient()

    first, second, refused = (client.get("/drf-rate/") for _ in range(3))

    assert first["RateLimit-Limit"] == "2"
    assert first["RateLimit-Policy"] == "2;w=60"
    assert (first["RateLimit-Remaining"], second["RateLimit-Remaining"]) == ("1", "0")
    assert int(second["RateLimit-Reset"]) == 60
    assert refused.status_code == 429
    assert refused["RateLimit-Remaining"] == "0"
    assert 1 <= int(refused["Retry-After"]) <= 30
    assert "RateLimit-Limit" not in client.get("/unscoped/")


@override_settings(
    RATEQUEUE={"RATE_LIMITS": API_CALLS},
    REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"anon": "5/minute"}},
)
def test_with_two_throttles_the_headers_show_the_tighter_limit() -> None:
    client = APIClient()

    response = client.get("/two-limits/")

    assert response["RateLimit-Limit"] == "2"  # api_calls: 1 left, anon: 4
    assert response["RateLimit-Remaining"] == "1"


@override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"strict": "3/minute"}})
def test_a_strict_throttle_spaces_requests_and_says_so() -> None:
    client = APIClient()

    assert statuses(client, "/strict/", 2) == [200, 429]
    assert 1 <= int(client.get("/strict/")["Retry-After"]) <= 20

"""DRF's own throttling tests (``tests/test_throttling.py``), adapted to our throttles.

Each test keeps DRF's scenario and DRF's name. Where the answer differs, the difference
is the documented one: a DRF rate string becomes a token bucket, which refills a token
every ``period / N`` instead of forgetting a request ``period`` after it was made, so
``Retry-After`` is the time until the next token (20 s for ``3/min`` where DRF's sliding
log says 60). DRF's timer is replaced by moving every stored limit's time back
(:func:`advance`), which is the same as time passing for the limits.

Not adapted: the tests of ``BaseThrottle`` and of ``SimpleRateThrottle`` internals
(``parse_rate``, ``history``, ``get_cache_key``), ``NonTimeThrottle`` (not ours), and
``1/2-sec`` rates, which the installed DRF does not read either.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db.models import F
from django.http import HttpRequest
from django.test import override_settings
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory, force_authenticate
from rest_framework.views import APIView

from django_ratequeue.contrib.drf import (
    AnonRateLimitThrottle,
    RateLimitThrottle,
    UserRateLimitThrottle,
)
from django_ratequeue.models import RateLimitState

pytestmark = pytest.mark.django_db

factory = APIRequestFactory()


def advance(seconds: float) -> None:
    """Let ``seconds`` pass for every stored limit (a token bucket's state is relative)."""
    RateLimitState.objects.update(ts=F("ts") - seconds)


class User3SecRateThrottle(UserRateLimitThrottle):
    rate = "3/sec"
    scope = "seconds"


class User3MinRateThrottle(UserRateLimitThrottle):
    rate = "3/min"
    scope = "minutes"


class User6MinRateThrottle(UserRateLimitThrottle):
    rate = "6/min"
    scope = "minutes"


class Foo(APIView):
    def get(self, request: Request) -> Response:
        return Response("foo")


class MockView(Foo):
    throttle_classes = [User3SecRateThrottle]


class MockView_DoubleThrottling(Foo):
    throttle_classes = [User3SecRateThrottle, User6MinRateThrottle]


class MockView_MinuteThrottling(Foo):
    throttle_classes = [User3MinRateThrottle]


def call(view: type[APIView], request: Any = None) -> Any:
    return view.as_view()(request or factory.get("/"))


# -- ThrottlingTests -------------------------------------------------------------------


def test_requests_are_throttled() -> None:
    request = factory.get("/")
    responses = [call(MockView, request) for _ in range(4)]
    assert responses[-1].status_code == 429


def test_request_throttling_expires() -> None:
    request = factory.get("/")
    assert [call(MockView, request).status_code for _ in range(4)][-1] == 429
    advance(1)
    assert call(MockView, request).status_code == 200


def test_request_throttling_is_per_user() -> None:
    request = factory.get("/")
    request.user = User.objects.create(username="a")
    for _ in range(3):
        call(MockView, request)
    request.user = User.objects.create(username="b")
    assert call(MockView, request).status_code == 200


def test_request_throttling_multiple_throttles() -> None:
    """Every throttle sees every request, also one another throttle refuses. DRF says
    Retry-After 59, then 58 (the oldest of six requests leaves the minute); the 6/min
    bucket has 0.1 token left, a token every 10 s: 9, then 8."""
    request = factory.get("/")
    for _ in range(4):
        response = call(MockView_DoubleThrottling, request)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 1

    advance(1)
    for _ in range(2):
        assert call(MockView_DoubleThrottling, request).status_code == 200
    response = call(MockView_DoubleThrottling, request)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 9

    advance(1)
    response = call(MockView_DoubleThrottling, request)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 8


def test_throttle_rate_change_negative() -> None:
    """DRF: 60 (a full minute); the empty 6/min bucket: one token in 10 s."""
    request = factory.get("/")
    for _ in range(24):
        response = call(MockView_DoubleThrottling, request)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 10


def retry_after_headers(view: type[APIView], steps: list[float]) -> list[str | None]:
    request = factory.get("/")
    seen = []
    for step in steps:
        advance(step)
        seen.append(call(view, request).headers.get("Retry-After"))
    return seen


def test_seconds_fields() -> None:
    assert retry_after_headers(MockView, [0, 0, 0, 0]) == [None, None, None, "1"]


def test_minutes_fields() -> None:
    """DRF says 60: the first of three requests leaves the minute in 60 s. The bucket has
    a token again in 20 s."""
    assert retry_after_headers(MockView_MinuteThrottling, [0, 0, 0, 0]) == [
        None,
        None,
        None,
        "20",
    ]


def test_next_rate_remains_constant_if_followed() -> None:
    assert retry_after_headers(MockView_MinuteThrottling, [0, 20, 20, 20, 20]) == [None] * 5


# -- ScopedRateThrottleTests -----------------------------------------------------------


class XYScopedRateThrottle(RateLimitThrottle):
    THROTTLE_RATES = {"x": "3/min", "y": "1/min"}


class XView(Foo):
    throttle_classes = [XYScopedRateThrottle]
    throttle_scope = "x"


class YView(Foo):
    throttle_classes = [XYScopedRateThrottle]
    throttle_scope = "y"


class UnscopedView(Foo):
    throttle_classes = [XYScopedRateThrottle]


def test_scoped_rate_throttle() -> None:
    request = factory.get("/")

    def hit(view: type[APIView], seconds: float = 1) -> int:
        advance(seconds)
        return int(call(view, request).status_code)

    for _ in range(2):  # the same within the minute and after it
        assert [hit(XView), hit(XView), hit(XView), hit(XView)] == [200, 200, 200, 429]
        assert [hit(YView), hit(YView)] == [200, 429]
        advance(55)


def test_unscoped_view_not_throttled() -> None:
    request = factory.get("/")
    for _ in range(10):
        advance(1)
        assert call(UnscopedView, request).status_code == 200


def test_get_cache_key_returns_correct_key_if_user_is_authenticated() -> None:
    class DummyView:
        throttle_scope = "user"

    request = Request(HttpRequest())
    user = User.objects.create(username="test")
    force_authenticate(request, user)
    request.user = user
    throttle = RateLimitThrottle()
    assert throttle.get_key(request, DummyView()) == f"user:{user.pk}"


# -- XffTestingBase and its tests --------------------------------------------------------


class OnePerDay(RateLimitThrottle):
    THROTTLE_RATES = {"test_limit": "1/day"}


class XffView(Foo):
    throttle_classes = [OnePerDay]
    throttle_scope = "test_limit"


def xff_request(forwarded_for: str = "0.0.0.0, 1.1.1.1, 2.2.2.2") -> Any:
    return factory.get("/some_uri", REMOTE_ADDR="3.3.3.3", HTTP_X_FORWARDED_FOR=forwarded_for)


def proxies(count: int | None) -> Any:
    return override_settings(REST_FRAMEWORK={"NUM_PROXIES": count})


@proxies(0)
def test_accepts_request_under_limit() -> None:
    assert call(XffView, xff_request()).status_code == 200


@proxies(0)
def test_denies_request_over_limit() -> None:
    call(XffView, xff_request())
    assert call(XffView, xff_request()).status_code == 429


@proxies(1)
def test_xff_spoofing_doesnt_change_machine_id_with_one_app_proxy() -> None:
    call(XffView, xff_request())
    assert call(XffView, xff_request("4.4.4.4, 5.5.5.5, 2.2.2.2")).status_code == 429


@proxies(2)
def test_xff_spoofing_doesnt_change_machine_id_with_two_app_proxies() -> None:
    call(XffView, xff_request())
    assert call(XffView, xff_request("4.4.4.4, 1.1.1.1, 2.2.2.2")).status_code == 429


@proxies(1)
def test_unique_clients_are_counted_independently_with_one_proxy() -> None:
    call(XffView, xff_request())
    assert call(XffView, xff_request("0.0.0.0, 1.1.1.1, 7.7.7.7")).status_code == 200


@proxies(2)
def test_unique_clients_are_counted_independently_with_two_proxies() -> None:
    call(XffView, xff_request())
    assert call(XffView, xff_request("0.0.0.0, 7.7.7.7, 2.2.2.2")).status_code == 200


@proxies(None)
def test_without_num_proxies_forwarded_for_is_not_trusted() -> None:
    """DRF's own throttles key on the whole X-Forwarded-For when NUM_PROXIES is unset, so a
    client that sends a new value each time is never throttled. Ours key on REMOTE_ADDR."""
    call(XffView, xff_request())
    for forged in ["9.9.9.1", "9.9.9.2, 2.2.2.2", "", "x" * 10_000]:
        assert call(XffView, xff_request(forged)).status_code == 429


# -- SimpleRateThrottleTests -------------------------------------------------------------


class Scoped(RateLimitThrottle):
    THROTTLE_RATES = {"anon": None}


def test_throttle_raises_error_if_rate_is_missing() -> None:
    class Invalid(RateLimitThrottle):
        scope = "invalid scope"
        THROTTLE_RATES: dict[str, str | None] = {}

    with pytest.raises(ImproperlyConfigured, match="'invalid scope'"):
        Invalid().allow_request(Request(HttpRequest()), Foo())


def test_allow_request_returns_true_if_rate_is_none() -> None:
    """A ``None`` rate turns the throttle off before any key is computed."""

    class Off(Scoped):
        scope = "anon"

        def get_key(self, request: Any, view: Any) -> str | None:
            raise AssertionError("no key is computed for a throttle that is off")

    assert Off().allow_request(request={}, view={}) is True


def test_allow_request_returns_true_if_key_is_none() -> None:
    class NoKey(RateLimitThrottle):
        rate = "1/min"

        def get_key(self, request: Any, view: Any) -> str | None:
            return None

    throttle = NoKey()
    assert throttle.allow_request(request={}, view={}) is True
    assert throttle.wait() is None


# -- AnonRateThrottleTests ---------------------------------------------------------------


def test_authenticated_user_not_affected() -> None:
    request = Request(HttpRequest())
    user = User.objects.create(username="test")
    force_authenticate(request, user)
    request.user = user
    assert AnonRateLimitThrottle().get_key(request, view={}) is None


def test_get_cache_key_returns_correct_value() -> None:
    """DRF's key for a request without an address is ``throttle_anon_None``: such requests
    share one limit, as they do here."""
    request = Request(HttpRequest())
    assert AnonRateLimitThrottle().get_key(request, view={}) == "ip:"


# -- the class's rate wins, as in DRF ------------------------------------------------------


class FivePerMinute(RateLimitThrottle):
    rate = "5/min"


@override_settings(
    RATEQUEUE={"RATE_LIMITS": {"busy": {"kind": "token bucket", "rate": 1, "period": 60}}},
    REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"busy": "1/min"}},
)
def test_a_throttle_class_rate_wins_over_the_settings() -> None:
    class Busy(Foo):
        throttle_classes = [FivePerMinute]
        throttle_scope = "busy"

    class Unscoped(Foo):
        throttle_classes = [FivePerMinute]

    request = factory.get("/")
    assert [call(Busy, request).status_code for _ in range(6)] == [200] * 5 + [429]
    assert [call(Unscoped, request).status_code for _ in range(6)] == [200] * 5 + [429]


# -- a request without a key is allowed before the rate is parsed, as in DRF ---------------


class SkipsHealthChecks(RateLimitThrottle):
    """A throttle ported from DRF: its ``get_cache_key`` skips the health checker."""

    rate = "1/min"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        if request.headers.get("user-agent") == "health-check":
            return None
        return f"ip:{self.get_ident(request)}"


class HealthView(Foo):
    throttle_classes = [SkipsHealthChecks]


def test_a_drf_throttles_get_cache_key_decides_the_key() -> None:
    health = factory.get("/", HTTP_USER_AGENT="health-check")
    assert [call(HealthView, health).status_code for _ in range(3)] == [200, 200, 200]
    assert not RateLimitState.objects.exists()
    assert [call(HealthView).status_code for _ in range(2)] == [200, 429]
    assert list(RateLimitState.objects.values_list("key", flat=True)) == ["ip:127.0.0.1"]


class AnonymousOnly(AnonRateLimitThrottle):
    THROTTLE_RATES = {"anon": "100/fortnight"}  # not a rate: parsed only for a request it keys


def test_a_request_without_a_key_is_allowed_before_the_rate_is_parsed() -> None:
    request = Request(HttpRequest())
    user = User.objects.create(username="test")
    force_authenticate(request, user)
    request.user = user
    assert AnonymousOnly().allow_request(request, Foo()) is True
    with pytest.raises(ImproperlyConfigured, match="100/fortnight"):
        AnonymousOnly().allow_request(Request(HttpRequest()), Foo())

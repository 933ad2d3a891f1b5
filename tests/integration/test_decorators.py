"""@ratelimit on function and class-based views: 429s, headers, keys, methods, failures."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings
from django.utils.decorators import method_decorator
from django.utils.functional import SimpleLazyObject
from django.views import View

from django_ratequeue import FixedWindow, TokenBucket
from django_ratequeue.decorators import ratelimit, response_failed, response_succeeded
from django_ratequeue.exceptions import RateLimited

pytestmark = pytest.mark.django_db

THREE_PER_MINUTE = TokenBucket(rate=3, period=60)
rf = RequestFactory()


def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def statuses(view, requests) -> list[int]:  # type: ignore[no-untyped-def]
    return [view(request).status_code for request in requests]


def test_refuses_with_429_and_retry_after_once_the_limit_is_spent() -> None:
    view = ratelimit("pages", config=THREE_PER_MINUTE)(ok)

    assert statuses(view, [rf.get("/")] * 3) == [200, 200, 200]
    refused = view(rf.get("/"))

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 20  # one token back in 20 s, rounded up
    assert refused["RateLimit-Limit"] == "3"
    assert refused["RateLimit-Remaining"] == "0"
    assert 1 <= int(refused["RateLimit-Reset"]) <= 60  # full again within the period
    assert refused["RateLimit-Policy"] == "3;w=60"


def test_admitted_responses_carry_the_remaining_tokens() -> None:
    view = ratelimit("pages", config=TokenBucket(rate=10, period=60, capacity=20))(ok)

    first = view(rf.get("/"))

    assert first.status_code == 200
    assert first["RateLimit-Limit"] == "20"
    assert first["RateLimit-Remaining"] == "19"
    assert first["RateLimit-Policy"] == "10;w=60;burst=20"
    assert "Retry-After" not in first


def test_fixed_window_reset_is_the_next_window() -> None:
    view = ratelimit("api", config=FixedWindow(rate=2, period=3600, start=0))(ok)

    view(rf.get("/"))
    view(rf.get("/"))
    refused = view(rf.get("/"))

    assert refused.status_code == 429
    assert refused["Retry-After"] == refused["RateLimit-Reset"]


def test_ip_key_limits_each_address_alone() -> None:
    view = ratelimit("pages", key="ip", config=TokenBucket(rate=1, period=60))(ok)

    assert view(rf.get("/", REMOTE_ADDR="192.0.2.1")).status_code == 200
    assert view(rf.get("/", REMOTE_ADDR="192.0.2.1")).status_code == 429
    assert view(rf.get("/", REMOTE_ADDR="192.0.2.2")).status_code == 200


def test_ipv6_addresses_share_their_64_network() -> None:
    view = ratelimit("pages", key="ip", config=TokenBucket(rate=1, period=60))(ok)

    assert view(rf.get("/", REMOTE_ADDR="2001:db8::1")).status_code == 200
    assert view(rf.get("/", REMOTE_ADDR="2001:db8::ffff")).status_code == 429
    assert view(rf.get("/", REMOTE_ADDR="2001:db8:0:1::1")).status_code == 200


def test_ipv4_mapped_addresses_are_keyed_as_their_ipv4_address() -> None:
    """A dual-stack server reports IPv4 clients as ::ffff:a.b.c.d: each stays its own
    client (not one /64 for all IPv4) and is the same client as a.b.c.d."""
    view = ratelimit("pages", key="ip", config=TokenBucket(rate=1, period=60))(ok)

    assert view(rf.get("/", REMOTE_ADDR="::ffff:192.0.2.1")).status_code == 200
    assert view(rf.get("/", REMOTE_ADDR="::ffff:192.0.2.2")).status_code == 200
    assert view(rf.get("/", REMOTE_ADDR="192.0.2.1")).status_code == 429


@pytest.mark.parametrize(
    ("address", "same_client"),
    [
        ("192.0.2.1:5678", "192.0.2.1"),
        ("[2001:db8::1]:443", "2001:db8::2"),
        ("[::ffff:192.0.2.1]:80", "192.0.2.1"),
        ("2001:db8:0:1::80", "2001:db8:0:1::1"),  # no brackets: all of it is the address
    ],
)
def test_a_port_after_the_address_is_not_part_of_the_client(
    address: str, same_client: str
) -> None:
    view = ratelimit("pages", key="ip", config=TokenBucket(rate=1, period=60))(ok)

    assert view(rf.get("/", REMOTE_ADDR=address)).status_code == 200
    assert view(rf.get("/", REMOTE_ADDR=same_client)).status_code == 429


def test_an_over_long_address_is_hashed_into_the_key() -> None:
    view = ratelimit("pages", key="ip", config=TokenBucket(rate=1, period=60))(ok)
    placeholder = "unix:" + "x" * 10_000_000

    assert view(rf.get("/", REMOTE_ADDR=placeholder)).status_code == 200
    assert view(rf.get("/", REMOTE_ADDR=placeholder)).status_code == 429
    assert view(rf.get("/", REMOTE_ADDR=placeholder + "y")).status_code == 200


def with_user(request: HttpRequest, user: object) -> HttpRequest:
    request.user = user  # type: ignore[assignment]
    return request


def test_user_key_limits_each_user_and_rejects_anonymous_requests() -> None:
    alice = User.objects.create(username="alice")
    bob = User.objects.create(username="bob")
    view = ratelimit("pages", key="user", config=TokenBucket(rate=1, period=60))(ok)

    assert view(with_user(rf.get("/"), alice)).status_code == 200
    assert view(with_user(rf.get("/"), alice)).status_code == 429
    assert view(with_user(rf.get("/"), bob)).status_code == 200
    with pytest.raises(ImproperlyConfigured, match="user_or_ip"):
        view(with_user(rf.get("/"), AnonymousUser()))


def test_user_or_ip_key_falls_back_to_the_address() -> None:
    alice = User.objects.create(username="alice")
    view = ratelimit("pages", key="user_or_ip", config=TokenBucket(rate=1, period=60))(ok)

    assert view(with_user(rf.get("/"), alice)).status_code == 200
    assert view(with_user(rf.get("/"), AnonymousUser())).status_code == 200
    assert view(with_user(rf.get("/"), AnonymousUser())).status_code == 429


def test_header_key_and_callable_key() -> None:
    one = TokenBucket(rate=1, period=60)
    by_header = ratelimit("api", key="header:X-Api-Key", config=one)
    by_team = ratelimit("api", key=lambda r: r.GET.get("team"), config=one)
    header_view, team_view = by_header(ok), by_team(ok)

    assert header_view(rf.get("/", HTTP_X_API_KEY="a")).status_code == 200
    assert header_view(rf.get("/", HTTP_X_API_KEY="a")).status_code == 429
    assert header_view(rf.get("/", HTTP_X_API_KEY="b")).status_code == 200
    assert team_view(rf.get("/?team=red")).status_code == 200
    assert team_view(rf.get("/?team=red")).status_code == 429
    # A callable returning None leaves the request unlimited.
    assert statuses(team_view, [rf.get("/")] * 3) == [200, 200, 200]


@pytest.mark.parametrize(
    ("key", "message"),
    [("ipaddress", "Unknown rate-limit key 'ipaddress'"), ("header:", "header:<Header-Name>")],
)
def test_bad_key_shorthand_fails_at_decoration(key: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ratelimit("pages", key=key)


@pytest.mark.parametrize(("option", "value"), [("methods", ["FETCH"]), ("count", 0)])
def test_bad_options_fail_at_decoration(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        ratelimit("pages", **{option: value})  # type: ignore[arg-type]


def test_method_filter_counts_only_the_named_methods() -> None:
    view = ratelimit("posts", methods=["post"], config=TokenBucket(rate=1, period=60))(ok)

    assert statuses(view, [rf.get("/")] * 3) == [200, 200, 200]
    assert view(rf.post("/")).status_code == 200
    assert view(rf.post("/")).status_code == 429
    assert "RateLimit-Limit" not in view(rf.get("/"))


def test_class_based_view_decorated_directly_or_with_method_decorator() -> None:
    @ratelimit("cbv", config=TokenBucket(rate=1, period=60))
    class Whole(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    class PostOnly(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

        @method_decorator(ratelimit("cbv-post", config=TokenBucket(rate=1, period=60)))
        def post(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    whole, post_only = Whole.as_view(), PostOnly.as_view()
    assert statuses(whole, [rf.get("/"), rf.get("/")]) == [200, 429]
    assert statuses(post_only, [rf.post("/"), rf.post("/"), rf.get("/")]) == [200, 429, 200]


def login(request: HttpRequest) -> HttpResponse:
    if request.POST.get("password") == "right":
        return HttpResponse("welcome")
    return HttpResponse("wrong password", status=401)


def test_failures_only_pattern_counts_failures_and_resets_on_success() -> None:
    view = ratelimit(
        "logins",
        key=lambda r: r.POST.get("username"),
        count_if=response_failed,
        reset_if=response_succeeded,
        config=TokenBucket(rate=3, period=3600),
    )(login)
    wrong = rf.post("/", {"username": "ann", "password": "wrong"})
    right = rf.post("/", {"username": "ann", "password": "right"})

    assert statuses(view, [wrong, wrong]) == [401, 401]
    assert view(right).status_code == 200  # success forgets the failures
    assert statuses(view, [wrong] * 3) == [401, 401, 401]
    refused = view(right)  # even the right password waits once failures are spent
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0


def test_successes_do_not_count_with_count_if() -> None:
    view = ratelimit("logins", count_if=response_failed, config=TokenBucket(rate=1, period=3600))(
        login
    )
    right = rf.post("/", {"password": "right"})

    assert statuses(view, [right] * 3) == [200, 200, 200]
    assert view(right)["RateLimit-Remaining"] == "1"


def custom_limited(request: HttpRequest, exception: RateLimited) -> HttpResponse:
    return HttpResponse(f"slow down, {exception.name}", status=429)


def test_custom_limited_view_by_argument_and_by_setting() -> None:
    config = TokenBucket(rate=1, period=60)
    view = ratelimit("pages", config=config, limited_view=custom_limited)(ok)
    view(rf.get("/"))

    refused = view(rf.get("/"))

    assert refused.content == b"slow down, pages"
    assert "Retry-After" in refused
    setting_view = ratelimit("other", config=config)(ok)
    setting_view(rf.get("/"))
    path = f"{__name__}.custom_limited"
    with override_settings(RATEQUEUE={"RATE_LIMITED_VIEW": path}):
        assert setting_view(rf.get("/")).content == b"slow down, other"


def test_limit_configured_in_settings() -> None:
    limits = {"settings_limit": {"kind": "token bucket", "rate": 1, "period": 60}}
    view = ratelimit("settings_limit")(ok)
    with override_settings(RATEQUEUE={"RATE_LIMITS": limits}):
        assert statuses(view, [rf.get("/"), rf.get("/")]) == [200, 429]


async def async_ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def test_async_views_are_limited_too() -> None:
    alice = User.objects.create(username="alice")
    view = ratelimit("async", key="user", config=TokenBucket(rate=1, period=60))(async_ok)
    # The user is loaded lazily, as by AuthenticationMiddleware: a query, kept off the loop.
    lazy_alice = SimpleLazyObject(lambda: User.objects.get(pk=alice.pk))
    requests = [with_user(rf.get("/"), lazy_alice) for _ in range(2)]

    assert statuses(async_to_sync(view), requests) == [200, 429]

"""Demo pages for the rate-limit use cases; the limits are in settings.RATEQUEUE.

* failed logins: 10 per hour per username, forgotten on success (the API, step by step);
* free-trial sign-ups: 100 per hour for everybody (``@ratelimit`` without a key);
* messages: 10 per minute per user or session, 20 may pile up (``@ratelimit`` keyed);
* a third-party weather API: 5 calls per fixed one-minute window (the API around a call);
* a DRF endpoint throttled by ``RateLimitThrottle`` (scope ``demo_api``, "5/minute").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratequeue import (
    check_rate_limit,
    get_rate_limit_value,
    rate_limit,
    reset_rate_limit,
)
from django_ratequeue.decorators import LimitedView, ratelimit
from django_ratequeue.exceptions import RateLimited


@dataclass(frozen=True)
class Outcome:
    """What a page shows after an attempt: the result, what is left, when to retry."""

    ok: bool
    message: str
    remaining: float
    retry_at: datetime | None = None
    # What a refusal is, when not a rate limit: e.g. "Wrong password".
    refusal: str = "Limited"

    @property
    def heading(self) -> str:
        return "OK" if self.ok else self.refusal

    @property
    def whole_remaining(self) -> int:
        """Whole requests left: tokens refill continuously, so the value is fractional."""
        return max(0, math.floor(self.remaining))

    @property
    def retry_in(self) -> int | None:
        if self.retry_at is None:
            return None
        return max(0, math.ceil((self.retry_at - datetime.now(UTC)).total_seconds()))


def limited_page(template: str) -> LimitedView:
    """A ``limited_view`` for ``@ratelimit`` that renders the demo page with status 429."""

    def limited(request: HttpRequest, exception: RateLimited) -> HttpResponse:
        remaining = get_rate_limit_value(exception.name, key=exception.key)
        outcome = Outcome(False, "Rate limited.", remaining, exception.retry_at)
        return render(request, template, {"outcome": outcome}, status=429)

    return limited


def login(request: HttpRequest) -> HttpResponse:
    """Check before trying, count only failures, forget them on success (password "demo")."""
    if request.method != "POST":
        return render(request, "demo/ratelimit_login.html")
    username = request.POST.get("username", "").strip() or "anonymous"
    check = check_rate_limit("failed_logins", key=username)
    if not check.ok:
        outcome = Outcome(False, f"Too many failed logins for {username}.", 0, check.retry_at)
        status = 429
    elif request.POST.get("password") == "demo":
        reset_rate_limit("failed_logins", key=username)
        remaining = get_rate_limit_value("failed_logins", key=username)
        outcome = Outcome(True, f"Welcome, {username}! Failures forgotten.", remaining)
        status = 200
    else:
        rate_limit("failed_logins", key=username)
        remaining = get_rate_limit_value("failed_logins", key=username)
        outcome = Outcome(
            False,
            f"this failure counts towards the 10 per hour of {username}.",
            remaining,
            refusal="Wrong password",
        )
        status = 401
    context = {"outcome": outcome, "username": username}
    return render(request, "demo/ratelimit_login.html", context, status=status)


@ratelimit(
    "free_trial_signup", methods=["POST"], limited_view=limited_page("demo/ratelimit_signup.html")
)
def signup(request: HttpRequest) -> HttpResponse:
    """One global limit: a flood of sign-ups waits, whoever sends them."""
    if request.method != "POST":
        return render(request, "demo/ratelimit_signup.html")
    email = request.POST.get("email", "").strip() or "someone@example.com"
    remaining = get_rate_limit_value("free_trial_signup")
    outcome = Outcome(True, f"Free trial started for {email}.", remaining)
    return render(request, "demo/ratelimit_signup.html", {"outcome": outcome})


def user_or_session(request: HttpRequest) -> str:
    """Signed-in users by id; anonymous visitors by their session."""
    if request.user.is_authenticated:
        return f"user:{request.user.pk}"
    if request.session.session_key is None:
        request.session.save()
    return f"session:{request.session.session_key}"


@ratelimit(
    "send_message",
    key=user_or_session,
    methods=["POST"],
    limited_view=limited_page("demo/ratelimit_messages.html"),
)
def messages(request: HttpRequest) -> HttpResponse:
    """Per-user limit with rollover: a quiet user may send a burst of up to 20."""
    if request.method != "POST":
        return render(request, "demo/ratelimit_messages.html")
    remaining = get_rate_limit_value("send_message", key=user_or_session(request))
    text = request.POST.get("text", "").strip() or "hello"
    outcome = Outcome(True, f"Sent: {text}", remaining)
    return render(request, "demo/ratelimit_messages.html", {"outcome": outcome})


def fetch_weather(city: str) -> str:
    """Stands in for a third-party API that allows 5 calls a minute."""
    return f"Sunny in {city}, 21 °C"


def weather(request: HttpRequest) -> HttpResponse:
    """Guard an outgoing call: a fixed window matches the provider's per-minute quota."""
    if request.method != "POST":
        return render(request, "demo/ratelimit_weather.html")
    city = request.POST.get("city", "").strip() or "Lisbon"
    result = rate_limit("weather_api")
    remaining = get_rate_limit_value("weather_api")
    if result.ok:
        outcome = Outcome(True, fetch_weather(city), remaining)
    else:
        outcome = Outcome(False, "Quota used up for this window.", remaining, result.retry_at)
    status = 200 if result.ok else 429
    return render(request, "demo/ratelimit_weather.html", {"outcome": outcome}, status=status)


class GreetingAPI(APIView):
    """Throttled by DEFAULT_THROTTLE_CLASSES (RateLimitThrottle) through its scope."""

    throttle_scope = "demo_api"

    def get(self, request: Request) -> Response:
        return Response({"greeting": "hello", "limit": "5 per minute per user or address"})

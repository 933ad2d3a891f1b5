"""The example project's rate-limit pages answer, and their limits kick in."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def hourly(name: str) -> override_settings:
    """The demo's limit ``name`` with an hour for its minute, so that no refill or window
    boundary falls inside a test however slowly it runs."""
    limits = dict(settings.RATEQUEUE["RATE_LIMITS"])
    limits[name] = {**limits[name], "period": 3600}
    return override_settings(RATEQUEUE={**settings.RATEQUEUE, "RATE_LIMITS": limits})


def test_home_links_every_rate_limit_page(client: Client) -> None:
    page = client.get("/").content.decode()

    for url in ["/ratelimits/login/", "/ratelimits/signup/", "/ratelimits/messages/"]:
        assert url in page
        assert client.get(url).status_code == 200
    assert "/ratelimits/weather/" in page and "/api/greeting/" in page


def test_eleventh_failed_login_is_limited_and_success_resets(client: Client) -> None:
    wrong = {"username": "alice", "password": "guess"}

    failures = [client.post("/ratelimits/login/", wrong) for _ in range(10)]
    limited = client.post("/ratelimits/login/", {"username": "alice", "password": "demo"})

    assert [r.status_code for r in failures] == [401] * 10
    # A wrong password is said to be one, not a rate limit; what is left is whole tries.
    assert "<strong>Wrong password</strong>" in failures[0].content.decode()
    assert "Limited" not in failures[0].content.decode()
    assert "Remaining now: <strong>9</strong>" in failures[0].content.decode()
    assert limited.status_code == 429
    assert "<strong>Limited</strong>" in limited.content.decode()
    assert "Too many failed logins for alice" in limited.content.decode()
    assert "Retry at" in limited.content.decode()
    # Another user is not affected, and a success forgets the failures.
    assert (
        client.post("/ratelimits/login/", {"username": "bob", "password": "x"}).status_code == 401
    )
    welcome = client.post("/ratelimits/login/", {"username": "bob", "password": "demo"})
    assert "Welcome, bob" in welcome.content.decode()
    assert "Remaining now: <strong>10</strong>" in welcome.content.decode()


@hourly("send_message")
def test_messages_allow_a_burst_of_20_then_429_with_headers(client: Client) -> None:
    sent = [client.post("/ratelimits/messages/", {"text": "hi"}) for _ in range(20)]
    limited = client.post("/ratelimits/messages/", {"text": "hi"})

    assert [r.status_code for r in sent] == [200] * 20
    assert limited.status_code == 429
    assert "<strong>Limited</strong>" in limited.content.decode()
    assert "Rate limited." in limited.content.decode()
    assert int(limited["Retry-After"]) >= 1
    assert limited["RateLimit-Limit"] == "20"
    # Another visitor has a session of their own, so a limit of their own.
    assert Client().post("/ratelimits/messages/", {"text": "hi"}).status_code == 200


def test_signup_is_limited_for_everybody_together(client: Client) -> None:
    first = client.post("/ratelimits/signup/", {"email": "a@example.com"})

    assert "Free trial started for a@example.com" in first.content.decode()
    assert first["RateLimit-Remaining"] == "99"
    assert (
        Client().post("/ratelimits/signup/", {"email": "b@example.com"})["RateLimit-Remaining"]
        == "98"
    )


@hourly("weather_api")
def test_weather_api_calls_stop_after_five_in_a_window(client: Client) -> None:
    calls = [client.post("/ratelimits/weather/", {"city": "Porto"}) for _ in range(6)]

    assert [r.status_code for r in calls] == [200] * 5 + [429]
    assert "Sunny in Porto" in calls[0].content.decode()
    assert "Quota used up" in calls[5].content.decode()


@override_settings(
    REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"demo_api": "5/hour"}}
)
def test_drf_endpoint_is_throttled(client: Client) -> None:
    statuses = [client.get("/api/greeting/").status_code for _ in range(6)]

    assert statuses == [200] * 5 + [429]
    assert int(client.get("/api/greeting/")["Retry-After"]) >= 1


def test_the_demo_serves_its_metrics(client: Client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert "# TYPE ratequeue_jobs_unfinished gauge" in response.content.decode()

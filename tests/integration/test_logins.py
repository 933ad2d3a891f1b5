"""protect_login on Django's own LoginView, with real users and passwords.

LoginView answers a failed login with 200 and the form again, so limits that judge the
response (count_if=response_failed, reset_if=response_succeeded) count nothing there and
reset on every failure. protect_login counts attempts per username and address before the
view and forgets them when that user logs in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_login_failed
from django.test import Client

from django_ratequeue.contrib.logins import login_key, protect_login
from django_ratequeue.models import RateLimitState

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.integration.login_urls")]


@pytest.fixture
def users() -> None:
    User.objects.create_user("alice", password="alice's secret")
    User.objects.create_user("mallory", password="mallory's own")


@pytest.fixture
def password_checks() -> Iterator[list[str]]:
    """The usernames whose password Django checked and found wrong."""
    checked: list[str] = []

    def failed(sender: Any, credentials: dict[str, str], **kwargs: Any) -> None:
        checked.append(credentials["username"])

    user_login_failed.connect(failed)
    yield checked
    user_login_failed.disconnect(failed)


def attempt(username: str, password: str, address: str = "192.0.2.1") -> Any:
    client = Client(REMOTE_ADDR=address)
    return client.post("/login/", {"username": username, "password": password})


def logged_in(response: Any) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


def test_judging_the_response_cannot_protect_login_view(users: None) -> None:
    """Why protect_login exists: LoginView's failures are 200s, so count_if counts none
    of them and reset_if resets the address's count on each."""
    client = Client()
    codes = [
        client.post("/judged-login/", {"username": "alice", "password": f"guess {i}"}).status_code
        for i in range(10)
    ]

    assert codes == [200] * 10
    assert not RateLimitState.objects.exists()


def test_failures_are_counted_and_refused_before_authentication(
    users: None, password_checks: list[str]
) -> None:
    codes = [attempt("alice", "guess").status_code for _ in range(3)]
    refused = attempt("alice", "alice's secret")  # the right one, too late

    assert codes == [200, 200, 200]  # LoginView shows the form again
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 1200
    assert not logged_in(refused)
    assert password_checks == ["alice"] * 3  # the refused attempt never reached a password


def test_a_login_forgets_that_users_failures_from_that_address(users: None) -> None:
    assert [attempt("alice", "guess").status_code for _ in range(2)] == [200, 200]
    assert logged_in(attempt("alice", "alice's secret"))

    assert [attempt("alice", "guess").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_each_username_and_address_is_limited_alone(users: None) -> None:
    for _ in range(3):
        attempt("alice", "guess")

    assert attempt("alice", "guess").status_code == 429
    assert logged_in(attempt("alice", "alice's secret", address="198.51.100.9"))
    assert logged_in(attempt("mallory", "mallory's own"))


def test_an_attackers_own_login_does_not_reset_the_victims_count(users: None) -> None:
    """What an IP-keyed counter reset on any success would allow: guess, log in to your
    own account, guess again."""
    for _ in range(2):
        attempt("alice", "guess")
        assert logged_in(attempt("mallory", "mallory's own"))

    assert attempt("alice", "guess").status_code == 200
    assert attempt("alice", "guess").status_code == 429


def test_usernames_are_compared_as_login_would_and_long_ones_fit(users: None) -> None:
    fullwidth = "\uff41\uff4c\uff49\uff43\uff45"  # "alice" in full-width letters
    for name in ["alice", "ALICE", fullwidth]:  # NFKC and case folded: one count
        attempt(name, "guess")
    assert attempt("Alice", "guess").status_code == 429

    huge = "x" * 1_000_000  # under DATA_UPLOAD_MAX_MEMORY_SIZE, over every column
    assert [attempt(huge, "guess").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert all(len(key) <= 255 for key in RateLimitState.objects.values_list("key", flat=True))


def test_the_form_and_other_methods_are_not_counted(users: None) -> None:
    client = Client()
    assert [client.get("/login/").status_code for _ in range(5)] == [200] * 5
    assert not RateLimitState.objects.exists()


def test_login_key_reads_the_field_given() -> None:
    from django.test import RequestFactory

    request = RequestFactory().post(
        "/", {"email": "Ann@Example.com"}, REMOTE_ADDR="::ffff:1.2.3.4"
    )
    assert login_key(request, username_field="email") == "ip:1.2.3.4|username:ann@example.com"
    with pytest.raises(ValueError, match="username_field"):
        protect_login("failed_logins", username_field="")

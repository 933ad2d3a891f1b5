"""System checks catch a bad ``RATEQUEUE["RATE_LIMITS"]`` at start-up."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_ratequeue.checks.config import check_settings


def errors_for(limits: Any) -> list[tuple[str, str]]:
    with override_settings(RATEQUEUE={"RATE_LIMITS": limits}):
        return [(error.id or "", error.msg) for error in check_settings()]


# Django's JSONField check asks SQLite, once per connection, whether it supports JSON: run
# alone, the test made that query without database access and failed.
@pytest.mark.django_db
def test_the_example_project_limits_are_valid() -> None:
    assert check_settings() == []
    assert not [e for e in run_checks() if (e.id or "").startswith("django_ratequeue.E1")]


def test_good_limits_pass() -> None:
    limits = {
        "login": {"kind": "token bucket", "rate": 10, "period": 3600},
        "api": {"kind": "fixed window", "rate": 100, "period": 60, "start": 0, "shards": 4},
    }
    assert errors_for(limits) == []


def test_rate_limits_must_be_a_dict() -> None:
    [(error_id, message)] = errors_for(["login"])
    assert error_id == "django_ratequeue.E101"
    assert "must be a dict of name -> config" in message


@pytest.mark.parametrize("name", ["", 7, "x" * 201])
def test_names_must_be_short_strings(name: Any) -> None:
    [(error_id, message)] = errors_for({name: {"kind": "token bucket", "rate": 1, "period": 1}})
    assert error_id == "django_ratequeue.E102"
    assert "invalid name" in message


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"kind": "sliding log", "rate": 1, "period": 1}, "Unknown rate-limit kind 'sliding log'"),
        ({"kind": "token bucket", "rate": 1, "period": 1, "size": 2}, "Unknown key(s) 'size'"),
        ({"kind": "token bucket", "period": 1}, "needs rate"),
        ({"kind": "fixed window", "rate": -5, "period": 1}, "rate must be greater than 0"),
        ({"kind": "fixed window", "rate": 5, "period": 0}, "period must be longer than 0"),
        ({"kind": "fixed window", "rate": 5, "period": 1, "shards": 1.5}, "shards must be"),
        (10, "must be a TokenBucket, a FixedWindow or a dict"),
    ],
)
def test_each_bad_limit_is_reported_by_name(config: Any, message: str) -> None:
    errors = errors_for({"good": {"kind": "token bucket", "rate": 1, "period": 1}, "bad": config})
    [(error_id, text)] = errors
    assert error_id == "django_ratequeue.E103"
    assert text.startswith("RATEQUEUE[\"RATE_LIMITS\"]['bad'] is invalid: ")
    assert message in text


@pytest.mark.parametrize("value", [True, False])
def test_async_commit_is_a_boolean(value: bool) -> None:
    with override_settings(RATEQUEUE={"RATE_LIMIT_ASYNC_COMMIT": value}):
        assert check_settings() == []
    with override_settings(RATEQUEUE={"RATE_LIMIT_ASYNC_COMMIT": "yes"}):
        [error] = check_settings()
    assert error.id == "django_ratequeue.E104"
    assert "must be True or False, got 'yes'" in error.msg

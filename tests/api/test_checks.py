"""The API's settings, checked at start-up like the others."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_ratequeue.checks.config import check_settings
from django_ratequeue.checks.services import check_anonymous_api

pytestmark = pytest.mark.django_db  # Django 6.1's checks query the database


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_allowing_anonymous_visitors_is_a_flag(value: Any) -> None:
    with override_settings(RATEQUEUE={"API_ALLOW_ANONYMOUS": value}):
        assert [error.id for error in check_settings()] == ["django_ratequeue.E303"]


@pytest.mark.parametrize("name", ["API_MAX_BODY_BYTES", "API_MAX_BULK_ITEMS"])
@pytest.mark.parametrize("value", [0, -1, 1.5, "10", 2**64])
def test_the_api_caps_are_positive_integers(name: str, value: Any) -> None:
    with override_settings(RATEQUEUE={name: value}):
        assert [error.id for error in check_settings()] == ["django_ratequeue.E201"]


def test_anonymous_visitors_need_sessions(settings: Any) -> None:
    settings.RATEQUEUE = {"API_ALLOW_ANONYMOUS": True}
    assert check_anonymous_api() == []
    settings.MIDDLEWARE = [
        m
        for m in settings.MIDDLEWARE
        if m != "django.contrib.sessions.middleware.SessionMiddleware"
    ]
    [error] = check_anonymous_api()
    assert error.id == "django_ratequeue.E304"
    settings.RATEQUEUE = {}
    assert check_anonymous_api() == []

"""The rate-limit admin: rows with their value now and configured limit; the reset action."""

from __future__ import annotations

import pytest
from django.test import Client

from django_ratequeue import rate_limit
from django_ratequeue.ratelimit.models import RateLimitState

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_ratequeue/ratelimitstate/"


def test_changelist_shows_value_now_and_configured_limit(admin_client: Client) -> None:
    for _ in range(3):
        rate_limit("send_message", key="user:7")  # 10 per minute, capacity 20

    page = admin_client.get(CHANGELIST).content.decode()

    assert "user:7" in page
    assert "token bucket: 10 per minute, capacity 20" in page
    assert "17.0" in page  # 20 - 3, plus what refilled since (a token every 6 s)


def test_changelist_filters_by_name_and_searches_keys(admin_client: Client) -> None:
    rate_limit("send_message", key="user:7")
    rate_limit("failed_logins", key="ann")

    def listed(**query: str) -> list[str]:
        changelist = admin_client.get(CHANGELIST, query).context["cl"]
        return [row.key for row in changelist.result_list]

    assert listed(name="failed_logins") == ["ann"]
    assert listed(q="user:7") == ["user:7"]


def test_reset_action_forgets_the_selected_limits(admin_client: Client) -> None:
    rate_limit("send_message", key="user:7")
    rate_limit("send_message", key="user:8")
    selected = RateLimitState.objects.get(key="user:7")

    response = admin_client.post(
        CHANGELIST, {"action": "reset", "_selected_action": [selected.pk]}, follow=True
    )

    assert "Reset 1 rate limit(s)." in response.content.decode()
    assert list(RateLimitState.objects.values_list("key", flat=True)) == ["user:8"]


def test_rows_are_read_only(admin_client: Client) -> None:
    rate_limit("send_message", key="user:7")
    row = RateLimitState.objects.get()

    detail = admin_client.get(f"{CHANGELIST}{row.pk}/change/")
    assert detail.status_code == 200
    assert 'name="value"' not in detail.content.decode()
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403

"""``manage.py ratelimits``: list, show, reset one key, reset all keys."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_ratequeue import FixedWindow, get_rate_limit_value, rate_limit
from django_ratequeue.ratelimit.models import RateLimitState

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("ratelimits", *args, stdout=out)
    return out.getvalue()


def test_list_shows_configured_limits_and_stored_rows() -> None:
    rate_limit("send_message", key="a")
    rate_limit("send_message", key="b")

    rate_limit("inline", config=FixedWindow(rate=1, period=90))

    rows = [line.split("  ") for line in run("list").splitlines()]
    columns = {name: [part.strip() for part in rest if part.strip()] for name, *rest in rows}

    assert columns["NAME"] == ["LIMIT", "STORED ROWS"]
    assert columns["send_message"] == ["token bucket: 10 per minute, capacity 20", "2"]
    assert columns["weather_api"] == ["fixed window: 5 per minute", "0"]
    assert columns["inline"] == ["inline config (not in RATE_LIMITS)", "1"]


def test_show_projects_each_stored_key_to_now() -> None:
    for _ in range(4):
        rate_limit("failed_logins", key="ann")
    rate_limit("failed_logins", key="bob")

    everything = run("show", "failed_logins")
    ann = run("show", "failed_logins", "--key", "ann")

    assert everything.startswith("failed_logins: token bucket: 10 per hour\n")
    assert "key ann  shard 0  6.00 now" in everything
    assert "key bob  shard 0  9.00 now" in everything
    assert "bob" not in ann
    assert "nothing stored" in run("show", "failed_logins", "--key", "nobody")


def test_reset_one_key() -> None:
    rate_limit("failed_logins", key="ann")
    rate_limit("failed_logins", key="bob")

    output = run("reset", "failed_logins", "--key", "ann")

    assert output == "Reset 'failed_logins' for key 'ann'.\n"
    assert get_rate_limit_value("failed_logins", key="ann") == 10
    assert get_rate_limit_value("failed_logins", key="bob") < 10


def test_reset_the_limit_without_key() -> None:
    rate_limit("free_trial_signup")

    run("reset", "free_trial_signup")

    assert not RateLimitState.objects.exists()


def test_reset_all_keys_without_input() -> None:
    rate_limit("failed_logins", key="ann")
    rate_limit("failed_logins", key="bob")
    rate_limit("send_message", key="ann")

    assert run("reset", "failed_logins", "--all-keys", "--no-input") == (
        "Reset 2 key(s) of 'failed_logins'.\n"
    )
    assert list(RateLimitState.objects.values_list("name", flat=True)) == ["send_message"]


def test_reset_all_keys_asks_first(monkeypatch: pytest.MonkeyPatch) -> None:
    rate_limit("failed_logins", key="ann")
    monkeypatch.setattr("builtins.input", lambda prompt: "no")

    with pytest.raises(CommandError, match="cancelled"):
        run("reset", "failed_logins", "--all-keys")
    assert RateLimitState.objects.exists()


@pytest.mark.parametrize("args", [("show", "nope"), ("reset", "nope", "--key", "x")])
def test_unknown_name_is_a_clear_error(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match=r"Unknown rate limit 'nope'.*failed_logins"):
        run(*args)

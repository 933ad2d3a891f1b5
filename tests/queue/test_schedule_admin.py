"""The schedules' admin: the list, pause, resume, run now (once on a double click), and an
edit of the expression refused with the reason when it is invalid; and the command that
lists them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from django_ratequeue.models import Job, Schedule
from django_ratequeue.plugins.schedules.sync import sync_schedules
from tests.queue.steps import Clock, freeze

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/django_ratequeue/schedule/"
CHANGE = "/admin/django_ratequeue/schedule/nightly/change/"


@pytest.fixture
def nightly(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    clock = freeze(monkeypatch)
    clock.moment = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    nightly = {"function": "tests.queue.jobs.add", "cron": "0 3 * * *", "args": [1, 2]}
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": {"nightly": nightly}}):
        sync_schedules(clock.now())
        yield clock


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("admin", password="not-used"))
    return client


def act(client: Client, action: str) -> None:
    response = client.post(CHANGELIST, {"action": action, "_selected_action": ["nightly"]})
    assert response.status_code == 302


def test_the_list_shows_the_next_run_and_the_misfire_policy(
    nightly: Clock, admin_client: Client
) -> None:
    page = admin_client.get(CHANGELIST).content.decode()
    assert "cron 0 3 * * * (UTC)" in page
    assert "skip: missed runs are skipped" in page
    assert "running" in page


def test_pause_resume_and_run_now(nightly: Clock, admin_client: Client) -> None:
    act(admin_client, "pause")
    row = Schedule.objects.get()
    assert row.paused and row.next_run_at is None
    act(admin_client, "resume")
    row = Schedule.objects.get()
    assert not row.paused and row.next_run_at == datetime(2026, 11, 28, 3, tzinfo=UTC)
    act(admin_client, "run_now")
    act(admin_client, "run_now")  # a double click
    assert list(Job.objects.values_list("id", flat=True)) == ["nightly@now-20261127T1200Z"]


def test_an_edit_of_the_expression_is_checked_and_stands(
    nightly: Clock, admin_client: Client
) -> None:
    refused = admin_client.post(CHANGE, {"cron": "0 27 * * *", "timezone": "UTC", "every": ""})
    assert refused.status_code == 200
    assert "cron &#x27;0 27 * * *&#x27; is invalid" in refused.content.decode()
    zone = admin_client.post(CHANGE, {"cron": "0 3 * * *", "timezone": "Mars/Base", "every": ""})
    assert "Mars/Base" in zone.content.decode()
    assert Schedule.objects.get().cron == "0 3 * * *"
    saved = admin_client.post(CHANGE, {"cron": "30 4 * * *", "timezone": "Europe/Paris"})
    assert saved.status_code == 302
    row = Schedule.objects.get()
    assert (row.cron, row.timezone) == ("30 4 * * *", "Europe/Paris")
    assert row.next_run_at == datetime(2026, 11, 28, 3, 30, tzinfo=UTC)
    assert "(edited)" in admin_client.get(CHANGELIST).content.decode()


def test_saving_the_form_unchanged_records_no_edit(nightly: Clock, admin_client: Client) -> None:
    saved = admin_client.post(CHANGE, {"cron": "0 3 * * *", "timezone": "UTC", "every": ""})
    assert saved.status_code == 302
    assert Schedule.objects.get().edited_at is None


def test_no_schedule_is_added_or_deleted_while_declared(
    nightly: Clock, admin_client: Client
) -> None:
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    assert admin_client.get(f"{CHANGELIST}nightly/delete/").status_code == 403


def test_the_command_lists_schedules_and_their_next_runs(nightly: Clock) -> None:
    out = StringIO()
    call_command("ratequeue_schedules", "--next", "3", stdout=out)
    text = out.getvalue()
    assert "nightly: tests.queue.jobs.add, cron 0 3 * * * (UTC), running, misfire skip" in text
    assert "then 2026-11-30T03:00:00+00:00" in text
    out = StringIO()
    call_command("ratequeue_schedules", "--json", stdout=out)
    (row,) = json.loads(out.getvalue())["schedules"]
    assert row["next"] == ["2026-11-28T03:00:00+00:00"]


def test_the_command_syncs_on_request(nightly: Clock) -> None:
    Schedule.objects.all().delete()
    out = StringIO()
    call_command("ratequeue_schedules", stdout=out)
    assert "nightly: declared, not synced yet" in out.getvalue()
    call_command("ratequeue_schedules", "--sync", stdout=StringIO(), stderr=StringIO())
    assert Schedule.objects.get().next_run_at == datetime(2026, 11, 28, 3, tzinfo=UTC)
    with pytest.raises(CommandError):
        call_command("ratequeue_schedules", "--next", "-1")


def test_the_command_names_a_schedule_named_by_its_function_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = freeze(monkeypatch)
    add = {"function": "tests.queue.jobs.add", "every": 60, "args": [1, 2]}
    named = {"tests.queue.jobs.add": add}
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": named}):
        sync_schedules(clock.now())
        out = StringIO()
        call_command("ratequeue_schedules", stdout=out)
    line = out.getvalue().splitlines()[0]
    assert line.startswith("tests.queue.jobs.add: every ") and line.count("jobs.add") == 1

"""Schedules that could not run are refused at start-up by a system check that says why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_ratequeue import check_ids, job
from django_ratequeue.checks.config import check_settings
from django_ratequeue.plugins.schedules import declarations
from django_ratequeue.plugins.schedules.checks import check_schedules

ADD = "tests.queue.jobs.add"


def errors(**schedules: Any) -> list[tuple[str, str]]:
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": schedules}):
        found = [*check_settings(), *check_schedules()]
    return [(error.id or "", error.msg) for error in found]


@pytest.fixture
def code_declarations() -> Iterator[None]:
    """Forget the schedules a test declares with @job."""
    kept = dict(declarations._declared_in_code)
    yield
    declarations._declared_in_code.clear()
    declarations._declared_in_code.update(kept)


def test_valid_schedules_pass() -> None:
    assert (
        errors(
            nightly={
                "function": ADD,
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
                "args": [1, 2],
            },
            tick={"function": ADD, "every": 60, "kwargs": {"a": 1, "b": 2}, "misfire": "all"},
        )
        == []
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"cron": "0 25 * * *"},
        {"cron": "0 3 * * *", "timezone": "Europe/Pariss"},
        {"every": 0},
        {"every": float("nan")},
        {"every": 1e300},
        {"every": 60, "misfire": "never"},
    ],
)
def test_an_invalid_schedule_is_a_check_error(bad: dict[str, Any]) -> None:
    found = errors(nightly={"function": ADD, "args": [1, 2], **bad})
    assert [check_id for check_id, _message in found] == [check_ids.SCHEDULE_INVALID]
    assert "nightly" in found[0][1]


def test_settings_that_are_not_a_dict_of_schedules() -> None:
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": ["nightly"]}):
        found = [*check_settings(), *check_schedules()]
    assert [e.id for e in found] == [check_ids.SCHEDULES_NOT_A_DICT]
    assert found[0].msg == (
        "RATEQUEUE[\"SCHEDULES\"] must be a dict of name -> schedule, got ['nightly']."
    )
    assert found[0].hint == (
        'e.g. {"nightly": {"function": "myapp.jobs.report", "cron": "0 3 * * *"}}'
    )


def test_an_invalid_schedule_is_reported_beside_other_invalid_settings() -> None:
    """The schedules plug-in parses its setting whatever the others hold: each problem once."""
    schedules = {"nightly": {"function": ADD, "cron": "0 25 * * *"}}
    with override_settings(
        RATEQUEUE={**settings.RATEQUEUE, "MAX_CONCURRENCY": 0, "SCHEDULES": schedules}
    ):
        found = [*check_settings(), *check_schedules()]
    assert [e.id for e in found] == ["django_ratequeue.E201", check_ids.SCHEDULE_INVALID]
    assert found[1].msg.startswith("RATEQUEUE[\"SCHEDULES\"]['nightly'] is invalid: ")


def test_a_function_that_is_not_a_registered_job_is_a_check_error() -> None:
    found = errors(nightly={"function": "tests.queue.jobs.nothing_here", "every": 60})
    assert [check_id for check_id, _message in found] == [check_ids.SCHEDULE_FUNCTION]
    assert "tests.queue.jobs.nothing_here" in found[0][1]


@pytest.mark.parametrize(
    "bad",
    [
        {"args": [1]},  # add(a, b)
        {"args": [1, 2], "options": {"priority": "high"}},
        {"args": [1, 2], "options": {"queue": {"name": ""}}},
        {"args": [1, 2], "options": {"colour": "red"}},
    ],
)
def test_arguments_or_options_that_fail_are_a_check_error(bad: dict[str, Any]) -> None:
    found = errors(nightly={"function": ADD, "every": 60, **bad})
    assert [check_id for check_id, _message in found] == [check_ids.SCHEDULE_OPTIONS]


def nightly_report() -> None:
    """A job declared recurring in code."""


def test_job_schedule_declares_a_schedule_checked_at_start_up(code_declarations: None) -> None:
    job(schedule="0 3 * * *", timezone="Europe/Paris", misfire="once")(nightly_report)
    assert errors() == []
    job(schedule="0 3 * * *", timezone="Nowhere/Town")(nightly_report)
    path = f"{__name__}.nightly_report"
    ((check_id, message),) = errors()
    assert check_id == check_ids.SCHEDULE_INVALID
    assert "Nowhere/Town" in message and path in message
    job(schedule=60)(nightly_report)
    found = errors(**{path: {"function": ADD, "every": 60, "args": [1, 2]}})
    assert [check_id for check_id, _message in found] == [check_ids.SCHEDULE_NAME_TAKEN]


def test_a_schedule_is_recorded_as_its_job_is_decorated(code_declarations: None) -> None:
    # A job module imported before the app starts (by a models.py) keeps its schedule:
    # @job hands it to the schedules plug-in as it decorates, whatever has loaded since.
    job(schedule="0 3 * * *", timezone="Europe/Paris")(nightly_report)
    path = f"{__name__}.nightly_report"
    assert declarations.code_declarations()[path] == {
        "function": path,
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
    }


def test_timezone_without_a_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="schedule="):
        job(timezone="Europe/Paris")(nightly_report)

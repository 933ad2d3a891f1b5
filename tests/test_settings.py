"""The typed settings object: one rule per setting, applied alike by the system checks and by
every process that reads the settings."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_ratequeue import Retry, TokenBucket, enqueue, set_queue_concurrency
from django_ratequeue.checks.config import check_settings
from django_ratequeue.conf import (
    DEFAULTS,
    DURATIONS,
    QueueConfig,
    RateQueueSettings,
    ratequeue_settings,
)
from django_ratequeue.models import Job
from tests.queue import jobs

# Django 6.1's checks query the database (JSONField support on SQLite).
pytestmark = pytest.mark.django_db

LONGEST = Job._meta.get_field("queue").max_length or 0


def problems(**configured: Any) -> list[tuple[str, str]]:
    with override_settings(RATEQUEUE=configured):
        return [(error.id or "", error.msg) for error in check_settings()]


def test_the_defaults_are_valid_and_typed() -> None:
    with override_settings(RATEQUEUE={}):
        settings = ratequeue_settings()
    assert isinstance(settings, RateQueueSettings)
    assert DEFAULTS["MAX_CONCURRENCY"] == settings.MAX_CONCURRENCY
    assert Retry(retry_count=6) == settings.DEFAULT_RETRIES
    assert settings.JOB_MODULES == ()
    assert settings.ENQUEUE_RATE_LIMIT is None
    assert settings.SCHEDULES == {}  # as given: the schedules plug-in parses it


def test_values_are_parsed_into_their_types() -> None:
    configured = {
        "QUEUES": {"emails": {"max_concurrency": 2, "rate_limit": "smtp"}, "bare": {}},
        "RATE_LIMITS": {"smtp": {"kind": "token bucket", "rate": 10, "period": 60}},
        "DEFAULT_RETRIES": {"retry_count": 2, "randomize_interval": False},
        "ENQUEUE_RATE_LIMIT": {"rate": 200, "period": 1, "capacity": 600},
        "JOB_MODULES": ["tests.queue.jobs"],
        "RETENTION": timedelta(days=1),
        "ROLLUP_RETENTION": timedelta(days=30),
    }
    with override_settings(RATEQUEUE=configured):
        settings = ratequeue_settings()
    assert settings.QUEUES["emails"] == QueueConfig(max_concurrency=2, rate_limit="smtp")
    assert settings.QUEUES["bare"] == QueueConfig()
    assert settings.RATE_LIMITS["smtp"] == TokenBucket(rate=10, period=60)
    assert Retry(retry_count=2, randomize_interval=False) == settings.DEFAULT_RETRIES
    assert TokenBucket(rate=200, period=1, capacity=600) == settings.ENQUEUE_RATE_LIMIT
    assert settings.JOB_MODULES == ("tests.queue.jobs",)
    assert settings.RETENTION == 86400.0
    assert settings.ROLLUP_RETENTION == 30 * 86400.0
    with pytest.raises(TypeError):
        settings.QUEUES["new"] = QueueConfig()  # type: ignore[index]


def test_override_settings_builds_them_again() -> None:
    before = ratequeue_settings()
    assert ratequeue_settings() is before  # built once
    with override_settings(RATEQUEUE={"MAX_CONCURRENCY": 3}):
        assert ratequeue_settings().MAX_CONCURRENCY == 3
    assert ratequeue_settings().MAX_CONCURRENCY == before.MAX_CONCURRENCY


def test_invalid_settings_stop_the_runtime_with_the_problems_the_checks_report() -> None:
    configured = {"MAX_CONCURRENCY": 0, "SEGMENT": math.nan, "QUEUES": {"q": {"paused": "no"}}}
    reported = problems(**configured)
    assert [number for number, _ in reported] == [
        "django_ratequeue.E201",
        "django_ratequeue.E202",
        "django_ratequeue.E216",
    ]
    with (
        override_settings(RATEQUEUE=configured),
        pytest.raises(ImproperlyConfigured) as refused,
    ):
        enqueue(jobs.add, args=[1, 2])
    for number, message in reported:
        assert f"{number}: {message}" in str(refused.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e308, -1, "1", True])
def test_durations_are_finite_and_bounded(value: Any) -> None:
    for name in DURATIONS:
        assert [n for n, _ in problems(**{name: value})] == ["django_ratequeue.E202"], name
    assert [n for n, _ in problems(RETENTION=value)] == ["django_ratequeue.E205"]
    assert [n for n, _ in problems(ROLLUP_RETENTION=value)] == ["django_ratequeue.E221"]
    assert [n for n, _ in problems(FAILED_RETENTION=value)] == ["django_ratequeue.E223"]


@pytest.mark.parametrize("value", [1e308, 2**64, 1.5, "10"])
def test_counts_are_bounded_integers(value: Any) -> None:
    for name in ("MAX_CONCURRENCY", "MAX_PROGRESS_BYTES", "MAX_OUTPUT_LENGTH"):
        assert [n for n, _ in problems(**{name: value})] == ["django_ratequeue.E201"], name


def test_a_queue_name_is_refused_alike_by_the_check_enqueue_and_control() -> None:
    """The rule is the model's column length, read in one place (it was 200 hard-coded in
    enqueue, and the check did not look at names)."""
    too_long = "q" * (LONGEST + 1)
    [(number, message)] = problems(QUEUES={too_long: {}})
    assert number == "django_ratequeue.E217"
    with pytest.raises(ValueError) as at_enqueue:
        enqueue(jobs.add, args=[1, 2], queue=too_long)
    assert str(at_enqueue.value) in message
    with pytest.raises(ValueError) as at_runtime:
        set_queue_concurrency(too_long, 2)
    assert str(at_runtime.value) == str(at_enqueue.value)
    assert not Job.objects.exists()


def test_a_queue_name_of_the_longest_length_is_accepted_alike() -> None:
    longest = "q" * LONGEST
    assert problems(QUEUES={longest: {"max_concurrency": 2}}) == []
    handle = enqueue(jobs.add, args=[1, 2], queue=longest)
    assert Job.objects.get(pk=handle.id).queue == longest
    set_queue_concurrency(longest, 2)


def test_a_queue_limit_above_the_ceiling_is_refused_alike() -> None:
    [(number, message)] = problems(MAX_QUEUE_CONCURRENCY=5, QUEUES={"q": {"max_concurrency": 6}})
    assert number == "django_ratequeue.E213"
    with override_settings(RATEQUEUE={"MAX_QUEUE_CONCURRENCY": 5}):
        with pytest.raises(ValueError) as at_enqueue:
            enqueue(jobs.add, args=[1, 2], queue={"name": "q", "max_concurrency": 6})
        with pytest.raises(ValueError) as at_runtime:
            set_queue_concurrency("q", 6)
    assert str(at_enqueue.value) in message
    assert str(at_runtime.value) == str(at_enqueue.value)


@pytest.mark.parametrize("rate_limit", ["missing", ["unhashable"], 3])
def test_a_queue_must_name_a_configured_rate_limit(rate_limit: Any) -> None:
    [(number, _message)] = problems(QUEUES={"q": {"rate_limit": rate_limit}})
    assert number == "django_ratequeue.E215"


@pytest.mark.parametrize("value", [None, "myproject.views.limited", print])
def test_the_rate_limited_view_is_a_view_or_its_path(value: Any) -> None:
    assert problems(RATE_LIMITED_VIEW=value) == []


@pytest.mark.parametrize("value", ["", 3, ["view"]])
def test_a_rate_limited_view_of_another_type_is_refused(value: Any) -> None:
    [(number, _message)] = problems(RATE_LIMITED_VIEW=value)
    assert number == "django_ratequeue.E105"


def test_ratequeue_must_be_a_dict() -> None:
    with override_settings(RATEQUEUE=["MAX_CONCURRENCY"]):
        [error] = check_settings()
        with pytest.raises(ImproperlyConfigured, match="must be a dict"):
            ratequeue_settings()
    assert error.id == "django_ratequeue.E002"


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_queue_is_remote_or_not(value: Any) -> None:
    assert [n for n, _ in problems(QUEUES={"gpu": {"remote": value}})] == ["django_ratequeue.E219"]
    assert problems(QUEUES={"gpu": {"remote": True}}, REMOTE_LEASE=5) == []
    assert [n for n, _ in problems(REMOTE_LEASE=math.inf)] == ["django_ratequeue.E202"]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_queue_shows_its_positions_or_not(value: Any) -> None:
    found = problems(QUEUES={"q": {"public_position": value}})
    assert [n for n, _ in found] == ["django_ratequeue.E226"]
    assert problems(QUEUES={"q": {"public_position": True}}) == []


def test_a_removed_setting_is_refused_with_the_reason() -> None:
    [(problem_id, message)] = problems(DISPATCH_BATCH_SIZE=50)
    assert problem_id == "django_ratequeue.E001"
    assert "DISPATCH_BATCH_SIZE" in message and "runners claim attempts" in message


@pytest.mark.parametrize("value", ["Local", "system", None, ["local"]])
def test_the_clock_is_the_databases_or_the_process_own(value: Any) -> None:
    assert [n for n, _ in problems(CLOCK=value)] == ["django_ratequeue.E230"]
    assert problems(CLOCK="local") == problems(CLOCK="database") == []


@pytest.mark.parametrize("value", [0, 1001, 1.5, "8", math.inf, True])
def test_slots_are_between_one_and_a_thousand(value: Any) -> None:
    assert [n for n, _ in problems(SLOTS=value)] == ["django_ratequeue.E222"]
    assert problems(SLOTS=1) == [] and problems(SLOTS=1000) == []

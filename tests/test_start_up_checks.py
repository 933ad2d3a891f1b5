"""The system checks that name the fix for what a new project most often gets wrong: SQLite
without ``transaction_mode: "IMMEDIATE"``, and no broker in ``Q_CLUSTER``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_ratequeue.checks import services

ROOT = Path(__file__).resolve().parents[1]
ORM_CLUSTER = {"name": "mysite", "orm": "default", "timeout": 300, "retry": 360}


def check(
    database: dict[str, Any],
    tmp_path: Path,
    command: tuple[str, ...] = ("check",),
    **settings: Any,
) -> Any:
    """``manage.py check`` (or another ``command``) in a fresh process of a project on
    ``database``; a setting given as ``None`` is left out."""
    configured = {
        "SECRET_KEY": "not secret",
        "INSTALLED_APPS": [
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django_q",
            "django_ratequeue",
        ],
        "DATABASES": {"default": {"NAME": str(tmp_path / "db.sqlite3"), **database}},
        "Q_CLUSTER": ORM_CLUSTER,
        **settings,
    }
    configured = {name: value for name, value in configured.items() if value is not None}
    code = (
        "import django; from django.conf import settings\n"
        f"settings.configure(**{configured!r})\n"
        "django.setup()\n"
        "from django.core.management import execute_from_command_line\n"
        f"execute_from_command_line(['manage.py', *{command!r}])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


SQLITE = "django.db.backends.sqlite3"


@pytest.mark.parametrize("options", [{}, {"transaction_mode": "DEFERRED"}, {"timeout": 30}])
def test_sqlite_without_locking_at_begin_fails_the_check_naming_the_option(
    options: dict[str, Any], tmp_path: Path
) -> None:
    done = check({"ENGINE": SQLITE, "OPTIONS": options}, tmp_path)
    assert done.returncode == 1
    assert "django_ratequeue.E306" in done.stderr
    assert "database is locked" in done.stderr
    assert 'DATABASES[\'default\']["OPTIONS"]["transaction_mode"] = "IMMEDIATE"' in done.stderr


@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_sqlite_locking_at_begin_passes(mode: str, tmp_path: Path) -> None:
    done = check({"ENGINE": SQLITE, "OPTIONS": {"transaction_mode": mode}}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


def test_other_databases_need_no_transaction_mode(tmp_path: Path) -> None:
    """Only the databases that hold ratequeue's tables are checked (the router's)."""
    postgres = {"ENGINE": "django.db.backends.postgresql", "NAME": "mysite"}
    plain_sqlite = {"ENGINE": SQLITE, "NAME": str(tmp_path / "other.sqlite3")}
    done = check(
        {"ENGINE": SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
        tmp_path,
        DATABASES={"default": postgres, "other": plain_sqlite},
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [(None, "Q_CLUSTER is not set"), ({"name": "mysite", "workers": 2}, "names no broker")],
)
def test_a_cluster_without_a_broker_fails_the_check(
    cluster: dict[str, Any] | None, problem: str, settings: Any
) -> None:
    if cluster is None:
        del settings.Q_CLUSTER
    else:
        settings.Q_CLUSTER = cluster
    [error] = services.check_cluster_broker()
    assert error.id == "django_ratequeue.E307"
    assert problem in error.msg
    assert "Redis on localhost:6379" in error.msg
    assert '"orm": "default"' in (error.hint or "")


@pytest.mark.parametrize("broker", ["orm", "redis", "django_redis", "sqs", "broker_class"])
def test_any_broker_named_passes(broker: str) -> None:
    with override_settings(Q_CLUSTER={"name": "mysite", broker: "x"}):
        assert services.check_cluster_broker() == []


def test_qcluster_stops_at_the_check_instead_of_a_redis_traceback(tmp_path: Path) -> None:
    """``manage.py qcluster`` runs the system checks first: the error names the fix."""
    database = {"ENGINE": SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    done = check(database, tmp_path, command=("qcluster", "--run-once"), Q_CLUSTER=None)
    assert done.returncode == 1
    assert "django_ratequeue.E307" in done.stderr
    assert "Q_CLUSTER is not set" in done.stderr


POSTGRES = {"ENGINE": "django.db.backends.postgresql", "NAME": "mysite"}


@pytest.mark.parametrize(
    ("database", "entry", "warned"),
    [
        ({**POSTGRES, "CONN_MAX_AGE": None}, {"ASGI_APPLICATION": "mysite.asgi.application"}, 1),
        ({**POSTGRES, "CONN_MAX_AGE": 600}, {"WSGI_APPLICATION": "example_project.wsgi.app"}, 1),
        ({**POSTGRES, "CONN_MAX_AGE": None}, {"WSGI_APPLICATION": "tests.wsgi.application"}, 0),
        ({**POSTGRES, "CONN_MAX_AGE": 0}, {"ASGI_APPLICATION": "mysite.asgi.application"}, 0),
        (
            {**POSTGRES, "CONN_MAX_AGE": None, "OPTIONS": {"pool": True}},
            {"ASGI_APPLICATION": "mysite.asgi.application"},
            0,
        ),
    ],
)
def test_persistent_connections_under_asgi_are_a_warning(
    database: dict[str, Any], entry: dict[str, str], warned: int
) -> None:
    """Told from an ASGI entry point: ASGI_APPLICATION, or an asgi module beside the WSGI
    application's (example_project has one, tests has none)."""
    with override_settings(**{"ASGI_APPLICATION": None, **entry}):
        found = services.asgi_connection_warnings({"default": database})
    assert [problem.id for problem in found] == ["django_ratequeue.W320"] * warned
    if found:
        assert "too many clients" in found[0].msg
        assert '"CONN_MAX_AGE": 0' in (found[0].hint or "")


IMMEDIATE = {"ENGINE": SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_q", "django_ratequeue"]


def test_a_project_without_django_q_fails_the_check(tmp_path: Path) -> None:
    """Not "Unknown command: 'qcluster'" later: the check names the fix (issue 31)."""
    apps = [app for app in APPS if app != "django_q"]
    done = check(IMMEDIATE, tmp_path, INSTALLED_APPS=apps)
    assert done.returncode == 1
    assert "django_ratequeue.E313" in done.stderr
    assert 'Add "django_q" to INSTALLED_APPS' in done.stderr


@pytest.mark.parametrize("name", ["RATEQUEU", "RATE_QUEUE", "RATEQUEUES", "RATEQEUE"])
def test_a_dict_named_like_a_misspelt_rates_setting_is_a_warning(
    name: str, tmp_path: Path
) -> None:
    done = check(IMMEDIATE, tmp_path, **{name: {"MAX_CONCURRENCY": 3}})
    assert done.returncode == 0, done.stderr  # a warning
    assert "django_ratequeue.W001" in done.stderr
    assert f"settings.{name} is a dict" in done.stderr


def test_settings_far_from_the_name_or_not_dicts_are_no_warning(tmp_path: Path) -> None:
    done = check(IMMEDIATE, tmp_path, RATEQUEU="a string", RATES={"x": 1}, RATEQUEUE={})
    assert done.returncode == 0, done.stderr
    assert "W001" not in done.stderr


def test_an_unknown_setting_is_told_the_nearest_known_one(tmp_path: Path) -> None:
    done = check(IMMEDIATE, tmp_path, RATEQUEUE={"MAX_CONCURENCY": 3, "FROBNICATE": 1})
    assert done.returncode == 1
    assert "django_ratequeue.E001" in done.stderr
    assert "MAX_CONCURENCY (did you mean MAX_CONCURRENCY?)" in done.stderr
    assert "FROBNICATE," in done.stderr or "FROBNICATE." in done.stderr  # nothing near


LIMITS = {"send_message": {"kind": "token bucket", "rate": 10, "period": 60}}


def test_limit_names_no_setting_defines_fail_the_check(tmp_path: Path) -> None:
    """``@ratelimit("send_mesage")`` and a throttle's scope: each a 500 at its first
    request, refused at ``check`` (issue 31)."""
    done = check(
        IMMEDIATE,
        tmp_path,
        INSTALLED_APPS=[*APPS, "rest_framework"],
        ROOT_URLCONF="tests.checked_urls",
        RATEQUEUE={"RATE_LIMITS": LIMITS},
    )
    assert done.returncode == 1
    errors = done.stderr
    assert "@ratelimit('send_mesage') on tests.checked_urls.send names a limit" in errors
    assert "@ratelimit('searches') on tests.checked_urls.Search" in errors, errors
    assert "RateLimitThrottle throttles Upload by the scope 'uploads'" in errors
    assert errors.count("django_ratequeue.E109") == 3  # send_message and Download pass


def test_a_queues_rate_limit_no_setting_defines_fails_the_check(tmp_path: Path) -> None:
    queues = {"llm": {"rate_limit": "llm_tokens"}}
    done = check(IMMEDIATE, tmp_path, RATEQUEUE={"RATE_LIMITS": LIMITS, "QUEUES": queues})
    assert done.returncode == 1
    assert "django_ratequeue.E215" in done.stderr and "'llm_tokens'" in done.stderr


def test_an_invalid_schedule_fails_the_check_once(tmp_path: Path) -> None:
    """The schedules plug-in registers its own check as the app starts (E241, said once)."""
    schedules = {"nightly": {"function": "myapp.jobs.report", "cron": "0 25 * * *"}}
    done = check(IMMEDIATE, tmp_path, RATEQUEUE={"SCHEDULES": schedules})
    assert done.returncode == 1
    assert done.stderr.count("django_ratequeue.E241") == 1
    assert "RATEQUEUE[\"SCHEDULES\"]['nightly'] is invalid: cron '0 25 * * *'" in done.stderr

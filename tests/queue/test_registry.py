"""Only registered functions run: enqueue, ``on_complete``, the admin's retry and the runner
accept the jobs that ``@job`` registered, and naming anything else imports nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import Client, override_settings

from django_ratequeue import Status, enqueue, enqueue_many, job
from django_ratequeue.checks.config import check_settings
from django_ratequeue.engine.execution import run_attempt
from django_ratequeue.engine.models import Outcome
from django_ratequeue.engine.registry import autodiscover, registered_job
from django_ratequeue.models import Attempt, Job
from tests.cluster import ROOT, wait_for
from tests.integration.test_queue_admin import run_action
from tests.queue import jobs
from tests.queue.side_effect import LOG

SIDE_EFFECT = "tests.queue.side_effect"
FIX = (
    r"decorate it with @job and make sure its module is imported at start-up "
    r"\(an installed app's jobs\.py or tasks\.py, or RATEQUEUE\['JOB_MODULES'\]\)"
)


def plain(x: int) -> int:
    """Module-level, but not a job."""
    return x


@pytest.fixture(autouse=True)
def side_effect_not_imported() -> Iterator[None]:
    """This module imported ``side_effect`` for its LOG name; each test starts without it."""
    sys.modules.pop(SIDE_EFFECT, None)
    yield
    sys.modules.pop(SIDE_EFFECT, None)


REFUSED: list[tuple[Callable[[], Any], str]] = [
    (lambda: enqueue("builtins.exec", args=["import os"]), "Unknown job function 'builtins.exec'"),
    (lambda: enqueue("os.system", args=["true"]), "Unknown job function 'os.system'"),
    (lambda: enqueue(os.system, args=["true"]), "Unknown job function 'posix.system'"),
    (lambda: enqueue(f"{SIDE_EFFECT}.wipe"), f"Unknown job function '{SIDE_EFFECT}.wipe'"),
    (lambda: enqueue_many(f"{SIDE_EFFECT}.wipe", [[1], [2]]), "Unknown job function"),
    (lambda: enqueue(plain, args=[1]), f"Unknown job function '{__name__}.plain'"),
    (lambda: enqueue_many(plain, [1, 2]), "Unknown job function"),
    (
        lambda: enqueue(jobs.add, args=[1, 2], on_complete="os.system"),
        "Unknown on_complete callback 'os.system'",
    ),
    (
        lambda: enqueue(jobs.add, args=[1, 2], on_complete=f"{SIDE_EFFECT}.wipe"),
        "Unknown on_complete callback",
    ),
    (lambda: jobs.add.using(on_complete="builtins.exec").enqueue(1, 2), "Unknown on_complete"),
    (lambda: enqueue(jobs.add, args=[1, 2], on_complete=plain), "Unknown on_complete callback"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_unregistered_functions_are_refused_and_nothing_is_written_or_imported(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        call()
    assert refused.match(FIX)
    assert not Job.objects.exists()
    assert SIDE_EFFECT not in sys.modules


def test_the_error_is_an_unknown_job_a_value_error() -> None:
    from django_ratequeue import UnknownJob

    with pytest.raises(UnknownJob) as refused:
        enqueue("builtins.exec", args=["import os"])
    assert isinstance(refused.value, ValueError)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["x" * 10_000_000, "%s", "a.b\n\x00", "", ".", "a..b"])
def test_hostile_names_are_refused_briefly(name: str) -> None:
    with pytest.raises(ValueError, match="Unknown job function") as refused:
        enqueue(name)
    assert len(str(refused.value)) < 600
    with pytest.raises(ValueError, match="Unknown on_complete callback") as refused:
        enqueue(jobs.add, args=[1, 2], on_complete=name)
    assert len(str(refused.value)) < 600
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_registered_jobs_are_enqueued_by_function_or_dotted_path() -> None:
    by_path = enqueue("tests.queue.jobs.add", args=[1, 2], on_complete="tests.queue.jobs.callback")
    by_function = enqueue(jobs.add, args=[1, 2], on_complete=jobs.callback)
    # An installed app's jobs.py, registered by autodiscovery.
    demo = enqueue("example_project.demo.jobs.fast", args=[3])
    rows = {row.id: row for row in Job.objects.all()}
    assert (rows[by_path.id].func, rows[by_path.id].on_complete) == (
        "tests.queue.jobs.add",
        "tests.queue.jobs.callback",
    )
    assert (rows[by_function.id].func, rows[by_function.id].on_complete) == (
        "tests.queue.jobs.add",
        "tests.queue.jobs.callback",
    )
    assert rows[demo.id].func == "example_project.demo.jobs.fast"


def test_job_registers_at_decoration_and_refuses_what_a_worker_could_not_find() -> None:
    with pytest.raises(ValueError, match="not a module-level function"):
        job(lambda: None)

    def inner() -> None: ...

    with pytest.raises(ValueError, match="not a module-level function"):
        job(inner)
    # Decorating a registered job again keeps the registered one: a path names one job.
    again = job(queue="elsewhere")(jobs.add)
    assert again.options.values == {"queue": "elsewhere"}
    assert again.func is jobs.add.func
    assert registered_job("tests.queue.jobs.add") is jobs.add


def test_start_up_registers_installed_apps_jobs_and_job_modules() -> None:
    """A fresh process: django.setup() alone registers them, before anything imports them."""
    script = (
        "import django, json, sys; django.setup(); "
        "from django_ratequeue.engine.registry import registered_job; "
        "names = ['example_project.demo.jobs.fast', 'tests.queue.jobs.add']; "
        "print(json.dumps([registered_job(name).path for name in names]))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["example_project.demo.jobs.fast", "tests.queue.jobs.add"]


def test_a_job_module_that_does_not_exist_stops_the_start() -> None:
    with (
        override_settings(RATEQUEUE={"JOB_MODULES": ["tests.queue.no_such_jobs"]}),
        pytest.raises(ImproperlyConfigured, match=r"JOB_MODULES.*'tests\.queue\.no_such_jobs'"),
    ):
        autodiscover()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tests.queue.jobs", "must be a list of module names"),
        (["tests.queue.jobs", 3], "must be a list of module names"),
        ([""], "must be a list of module names"),
    ],
)
def test_job_modules_are_checked(value: Any, message: str) -> None:
    with override_settings(RATEQUEUE={"JOB_MODULES": value}):
        errors = check_settings()
    assert [e.id for e in errors] == ["django_ratequeue.E220"]
    assert message in errors[0].msg


def test_good_job_modules_pass_the_check() -> None:
    with override_settings(RATEQUEUE={"JOB_MODULES": ["tests.queue.jobs"]}):
        assert check_settings() == []


@pytest.mark.django_db  # the runner reads the time on the database's clock
def test_the_runner_refuses_an_unregistered_row_function_without_importing_it() -> None:
    """A row changed behind the app's back fails for good, with the fix in its error."""
    attempt = Attempt(job=Job(id="forged", func=f"{SIDE_EFFECT}.wipe", args=[], kwargs={}))

    run_attempt(attempt)

    assert attempt.outcome == Outcome.NON_RETRYABLE
    assert f"Unknown job function '{SIDE_EFFECT}.wipe'" in attempt.error
    assert SIDE_EFFECT not in sys.modules


@pytest.mark.django_db
def test_the_admin_does_not_retry_an_unregistered_function(admin_client: Client) -> None:
    handle = enqueue(jobs.add, args=[1, 2])
    Job.objects.filter(pk=handle.id).update(func="os.system", status=Status.FAILED)

    page = run_action(admin_client, "retry_selected", handle.id)

    assert f"Could not retry {handle.id}: Unknown job function &#x27;os.system&#x27;" in page
    assert list(Job.objects.values_list("id", flat=True)) == [handle.id]


def test_workers_run_no_forged_function_and_innocent_jobs_go_on(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows whose function or callback was changed in the database: the worker neither
    imports nor runs them, and goes on. No worker knows them, so they fail with the fix in
    the error once UNKNOWN_JOB_PATIENCE has passed (as a newer deploy's job would)."""
    log = tmp_path / "side-effects.log"
    monkeypatch.setenv(LOG, str(log))
    cluster(UNKNOWN_JOB_PATIENCE=1.0)
    with transaction.atomic():
        forged = enqueue(jobs.add, args=[1, 2], retries=3)
        called_back = enqueue(jobs.add, args=[2, 2], on_complete=jobs.callback)
        Job.objects.filter(pk=forged.id).update(func=f"{SIDE_EFFECT}.wipe")
        Job.objects.filter(pk=called_back.id).update(on_complete=f"{SIDE_EFFECT}.wipe")
    innocent = enqueue(jobs.add, args=[20, 22])

    assert innocent.result(timeout=30) == 42
    assert called_back.result(timeout=30) == 4
    wait_for(lambda: forged.status() == Status.FAILED, message="the forged job to fail")
    (attempt,) = forged.attempts()
    assert attempt.outcome == Outcome.NON_RETRYABLE
    assert f"Unknown job function '{SIDE_EFFECT}.wipe'" in attempt.error
    callback = wait_for(
        lambda: (
            Job.objects.filter(parent_id="", func=f"{SIDE_EFFECT}.wipe")
            .exclude(pk=forged.id)
            .filter(status=Status.FAILED)
            .first()
        ),
        message="the forged callback to fail",
    )
    assert callback.attempts == 1
    assert not log.exists(), log.read_text()

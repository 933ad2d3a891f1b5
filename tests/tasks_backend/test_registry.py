"""django.tasks tasks run on ratequeue only when registered: defined for this backend, and
looked up by name on the worker without importing anything (Django 6.0+)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("django.tasks")

from django_ratequeue.backends import run_task
from django_ratequeue.models import Attempt, Job
from django_ratequeue.queue.execution import run_attempt
from django_ratequeue.queue.models import Outcome
from django_ratequeue.queue.registry import registered_task

from . import tasks

SIDE_EFFECT = "tests.queue.side_effect"


@pytest.fixture(autouse=True)
def side_effect_not_imported() -> Iterator[None]:
    sys.modules.pop(SIDE_EFFECT, None)
    yield
    sys.modules.pop(SIDE_EFFECT, None)


def test_a_task_registers_as_it_is_defined_for_this_backend() -> None:
    assert registered_task("tests.tasks_backend.tasks.add") is tasks.add
    # A copy for other defaults names the same task: the one defined stays registered.
    assert tasks.add.using(priority=3) is not tasks.add
    assert registered_task("tests.tasks_backend.tasks.add") is tasks.add


@pytest.mark.django_db  # the runner reads the time on the database's clock
@pytest.mark.parametrize("name", [f"{SIDE_EFFECT}.wipe", "os.system", "builtins.exec"])
def test_a_forged_task_name_is_neither_imported_nor_run(name: str) -> None:
    """A task job whose task name was changed in the database fails for good."""
    row = Job(
        id="forged",
        func=f"{run_task.__module__}.{run_task.__qualname__}",
        args=[],
        kwargs={"task": name, "args": ["true"], "kwargs": {}, "backend": "default"},
    )
    attempt = Attempt(job=row)

    run_attempt(attempt)

    assert attempt.outcome == Outcome.NON_RETRYABLE
    assert f"Unknown task {name!r}" in attempt.error
    assert "define it with @task for a ratequeue backend" in attempt.error
    assert SIDE_EFFECT not in sys.modules

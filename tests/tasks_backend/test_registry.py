"""django.tasks tasks run on ratequeue only when registered: defined for this backend, and
looked up by name on the worker without importing anything (Django 6.0+)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import pytest

pytest.importorskip("django.tasks")

from django.conf import settings
from django.tasks.exceptions import InvalidTask
from django.test import override_settings

from django_ratequeue.backends import run_task
from django_ratequeue.engine.execution import run_attempt
from django_ratequeue.engine.models import Outcome
from django_ratequeue.engine.registry import TASK_FIX, registered_task
from django_ratequeue.exceptions import UnknownJob
from django_ratequeue.models import Attempt, Job
from tests.tasks_backend import tasks

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


def late_module(tmp_path: Path, name: str, source: str) -> str:
    """Write module ``name`` (on sys.path for the test): importing it now is importing
    it after start-up, as a view or a helper module that no worker imports would be."""
    (tmp_path / f"{name}.py").write_text(source)
    return name


@pytest.fixture
def late_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("late_"):
            del sys.modules[name]


def test_a_task_defined_after_start_up_is_refused_where_it_is_defined(
    late_modules: Path,
) -> None:
    """Outside tasks.py (or JOB_MODULES) a task is not registered in the workers, which
    would fail it with UnknownJob: it is refused at once, with the same fix."""
    name = late_module(
        late_modules,
        "late_emails",
        "from django.tasks import task\n\n\n@task\ndef greet(name):\n    return name\n",
    )
    with pytest.raises(InvalidTask, match="defined after start-up") as refused:
        import_module(name)
    assert TASK_FIX in str(refused.value)
    with pytest.raises(UnknownJob):
        registered_task(f"{name}.greet")


def test_a_task_of_another_backend_cannot_be_switched_to_this_one(late_modules: Path) -> None:
    other = {
        **settings.TASKS,
        "other": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    with override_settings(TASKS=other):
        name = late_module(
            late_modules,
            "late_other",
            "from django.tasks import task\n\n\n"
            '@task(backend="other")\ndef greet(name):\n    return name\n',
        )
        greet = import_module(name).greet
        with pytest.raises(InvalidTask, match="defined after start-up"):
            greet.using(backend="default")

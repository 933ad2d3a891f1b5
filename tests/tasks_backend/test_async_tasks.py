"""``async def`` tasks (Django 6.0+) run as ``arun_task`` jobs, as coroutines on the
worker's event loop (not through ``async_to_sync``), with the framework's signals."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from asgiref.sync import sync_to_async
from django.db import connections
from django.tasks import TaskResultStatus
from django.tasks.signals import task_finished, task_started

from django_ratequeue.backends import TASK_JOBS, arun_task, run_task
from django_ratequeue.models import Job
from tests.cluster import wait_for
from tests.queue.steps import run_pass
from tests.tasks_backend import tasks

# The async tasks' queries run in asgiref's thread for sync code: the tests commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def close_sync_thread_connection() -> Iterator[None]:
    yield
    asyncio.run(sync_to_async(connections.close_all)())


@pytest.fixture
def signals() -> Iterator[list[tuple[str, str, TaskResultStatus]]]:
    """(signal, id, status) of every task_started and task_finished sent meanwhile."""
    sent: list[tuple[str, str, TaskResultStatus]] = []

    def started(sender: type, task_result: Any, **kwargs: Any) -> None:
        sent.append(("started", task_result.id, task_result.status))

    def finished(sender: type, task_result: Any, **kwargs: Any) -> None:
        sent.append(("finished", task_result.id, task_result.status))

    task_started.connect(started)
    task_finished.connect(finished)
    yield sent
    task_started.disconnect(started)
    task_finished.disconnect(finished)


def settle(*results: Any) -> None:
    """Run the loop in this process until every result is finished (a retry's back-off
    included: a deadline, not a number of passes, which take a few milliseconds each)."""

    def settled() -> bool:
        run_pass()
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    wait_for(settled, timeout=30, message="the tasks to finish")


def test_an_async_task_runs_as_a_coroutine_on_an_event_loop(
    signals: list[tuple[str, str, TaskResultStatus]],
) -> None:
    added = tasks.add_later.enqueue(20, 22)
    seen = tasks.introspect_later.enqueue("hi")
    plain = tasks.add.enqueue(1, 2)

    settle(added, seen, plain)

    funcs = dict(Job.objects.values_list("id", "func"))
    assert funcs[added.id] == funcs[seen.id] == f"{arun_task.__module__}.arun_task"
    assert funcs[plain.id] == f"{run_task.__module__}.run_task"
    assert set(funcs.values()) <= set(TASK_JOBS)
    assert (added.status, added.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert seen.return_value == {"label": "hi", "attempt": 1, "on_a_loop": True}
    assert tasks.add_later.get_result(added.id).return_value == 42
    assert [(s, status) for s, i, status in signals if i == added.id] == [
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]


def test_a_failing_async_task_is_retried_and_logged_with_its_exception(
    signals: list[tuple[str, str, TaskResultStatus]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "django.tasks")
    broke = tasks.break_down_later.enqueue("no luck")

    settle(broke)

    # One quick retry (tests/settings.py), so two attempts and two errors.
    assert broke.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in broke.errors] == [tasks.TaskBroke, tasks.TaskBroke]
    assert "raise TaskBroke(message)" in broke.errors[-1].traceback
    assert "raise exc" not in broke.errors[-1].traceback  # nothing of ours added to it
    assert [(s, status) for s, i, status in signals if i == broke.id] == [
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ] * 2
    # Django's own receiver logs task_finished with the exception it was sent for.
    logged = [r for r in caplog.records if r.exc_info and broke.id in r.getMessage()]
    assert logged and logged[0].exc_info[0] is tasks.TaskBroke

"""Tasks the backend tests enqueue (Django 6.0+); qcluster workers import them from here.

When ``RATEQUEUE_TASK_SIGNALS`` names a file, the framework's signals append a line to it,
so the tests can see the signals sent in worker processes.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sys
from typing import Any

from django.dispatch import receiver
from django.tasks import TaskContext, TaskResult, task
from django.tasks.signals import task_enqueued, task_finished, task_started

from django_ratequeue.backends import RateQueueBackend

SIGNAL_LOG = "RATEQUEUE_TASK_SIGNALS"


class TaskBroke(Exception):
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def break_down(message: str) -> None:
    raise TaskBroke(message)


@task
def not_a_number() -> float:
    return float("nan")


@task
def fail_together() -> None:
    raise ExceptionGroup("two things went wrong", [KeyError("first"), ValueError("second")])


@task
def leave(code: int) -> None:
    sys.exit(code)


@task
def divide(a: int, b: int) -> float:
    return a / b


@task(takes_context=True)
def introspect(context: TaskContext, label: str) -> dict[str, Any]:
    return {"label": label, "id": context.task_result.id, "attempt": context.attempt}


@task
async def add_later(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
async def break_down_later(message: str) -> None:
    await asyncio.sleep(0)
    raise TaskBroke(message)


@task(takes_context=True)
async def introspect_later(context: TaskContext, label: str) -> dict[str, Any]:
    """What an async task sees: its context, and the event loop it runs on."""
    loop = asyncio.get_running_loop()
    return {"label": label, "attempt": context.attempt, "on_a_loop": loop.is_running()}


def _log(signal: str, task_result: TaskResult, **kwargs: Any) -> None:
    path = os.environ.get(SIGNAL_LOG)
    if not path:
        return
    line = {
        "signal": signal,
        "id": task_result.id,
        "status": str(task_result.status),
        "attempts": task_result.attempts,
        "errors": [e.exception_class_path for e in task_result.errors],
    }
    with open(path, "a") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        log.write(json.dumps(line) + "\n")


@receiver(task_enqueued, sender=RateQueueBackend)
def log_enqueued(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
    _log("enqueued", task_result)


@receiver(task_started, sender=RateQueueBackend)
def log_started(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
    _log("started", task_result)


@receiver(task_finished, sender=RateQueueBackend)
def log_finished(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
    _log("finished", task_result)


def not_a_task(x: int) -> int:
    return x


# A task whose function is not at the import path of its name: a worker could not find it.
renamed = task(not_a_task)

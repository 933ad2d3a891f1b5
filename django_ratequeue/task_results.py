"""How a job the ``django.tasks`` backend enqueued reads as the framework's ``TaskResult``.

The backend (backends.py) answers ``get_result`` and ``enqueue`` with these; on Django
5.2 the module imports, and nothing calls it.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import django

from django_ratequeue.engine.models import Attempt, Job, Outcome, Status
from django_ratequeue.engine.registry import registered_task
from django_ratequeue.exceptions import JobCanceled, UnknownJob, class_path

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import Task, TaskResult, TaskResultStatus
    from django.tasks.base import TaskError

_P = ParamSpec("_P")
_R = TypeVar("_R")


def resolve_task(path: str) -> Task[..., Any]:
    """Return the task registered at ``path`` (:class:`UnknownJob` if none); import nothing."""
    found = registered_task(path)
    if not isinstance(found, Task):
        raise UnknownJob(f"{path!r} is not a task.")
    return found


def as_enqueued(task: Task[_P, _R], **values: Any) -> Task[_P, _R]:
    """Return a copy of ``task`` with the values its job was enqueued with, unvalidated.

    The values are the queue, priority and backend, not validated again (as ``Task.using``
    would): a result read back describes the task that ran, even after its queue or
    priority stopped being valid in the settings."""
    copy = object.__new__(type(task))
    for field in fields(task):
        object.__setattr__(copy, field.name, values.get(field.name, getattr(task, field.name)))
    return copy


def result_status(status: str) -> TaskResultStatus:
    """Return our status in the framework's terms.

    Waiting or retrying is READY, canceled FAILED."""
    if status == Status.RUNNING:
        return TaskResultStatus.RUNNING
    if status == Status.COMPLETE:
        return TaskResultStatus.SUCCESSFUL
    if status in (Status.FAILED, Status.CANCELED):
        return TaskResultStatus.FAILED
    return TaskResultStatus.READY


def task_result(
    job: Job, attempts: list[Attempt], task: Task[..., Any] | None = None
) -> TaskResult[..., Any]:
    """Return the framework's view of a job enqueued by the backend, and its attempts.

    ``task`` is rebuilt from the job unless given."""
    call = job.kwargs
    if task is None:
        run_after = call.get("run_after")  # None in rows enqueued before it was kept
        task = as_enqueued(
            resolve_task(call["task"]),
            priority=job.priority,
            queue_name=job.queue,
            backend=call["backend"],
            run_after=datetime.fromisoformat(run_after) if run_after else None,
        )
    tries = [a for a in attempts if a.started_at is not None]  # the others never ran
    errors = [attempt_error(a) for a in tries if a.outcome and a.outcome != Outcome.SUCCEEDED]
    if job.status == Status.CANCELED:
        errors.append(TaskError(exception_class_path=class_path(JobCanceled), traceback=""))
    result = TaskResult(
        task=task,
        id=job.id,
        status=result_status(job.status),
        enqueued_at=job.created_at,
        started_at=tries[0].started_at if tries else None,
        finished_at=job.finished_at,
        last_attempted_at=tries[-1].started_at if tries else None,
        args=call["args"],
        kwargs=call["kwargs"],
        backend=call["backend"],
        errors=errors,
        worker_ids=[a.worker for a in tries],
    )
    if job.status == Status.COMPLETE:
        object.__setattr__(result, "_return_value", job.result)
    return result


def attempt_error(attempt: Attempt) -> TaskError:
    """Return a failed attempt as a TaskError: the class its job raised, and its traceback.

    The class is as recorded when the attempt ended (``builtins.Exception`` for one that
    ended before rows kept it)."""
    return TaskError(
        exception_class_path=attempt.exception_class_path or class_path(Exception),
        traceback=attempt.traceback or attempt.error,
    )

"""A backend for Django's tasks framework (Django 6.0+): ``@task`` functions run on ratequeue.

``TASKS = {"default": {"BACKEND": "django_ratequeue.backends.RateQueueBackend"}}``. Each
enqueued task is one ratequeue job of :func:`run_task` (:func:`arun_task` for an ``async
def`` task), which sends the framework's signals around it: the engine knows nothing of
django.tasks. On Django 5.2 the module imports, but the backend refuses to start.
docs/django-tasks.md tells how tasks map to jobs, and how they are registered and found.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import django
from asgiref.sync import iscoroutinefunction, sync_to_async
from django.apps import AppConfig, apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_ratequeue import check_ids as ids
from django_ratequeue import plain
from django_ratequeue.engine.models import Attempt, Job, Status
from django_ratequeue.engine.options import JobOptions
from django_ratequeue.engine.optionvalues import QueueChoice
from django_ratequeue.engine.protocol import check_result_size
from django_ratequeue.engine.registry import BACKEND_PATH, function_path, register_task
from django_ratequeue.engine.subtasks import current_attempt
from django_ratequeue.intake.enqueue import enqueue_job
from django_ratequeue.intake.functions import JobFunction, job
from django_ratequeue.task_results import resolve_task, task_result

# The jobs the backend enqueues: run_task, arun_task for an ``async def`` task.
TASK_JOBS = ("django_ratequeue.backends.run_task", "django_ratequeue.backends.arun_task")

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    HAS_DJANGO_TASKS = True
else:
    HAS_DJANGO_TASKS = False

    class BaseTaskBackend:
        """Stand in for django.tasks' base class before Django 6.0, refusing to start."""

        def __init__(self, alias: str, params: dict[str, Any]) -> None:
            raise ImproperlyConfigured(NEEDS_DJANGO_6)


_P = ParamSpec("_P")
_R = TypeVar("_R")

NEEDS_DJANGO_6 = (
    f"{BACKEND_PATH} needs Django 6.0 or later (django.tasks); this is Django "
    f"{django.get_version()}. Upgrade Django, or enqueue with django_ratequeue.enqueue()."
)
# The backend OPTIONS, passed on as the defaults of every job it enqueues.
OPTION_NAMES = frozenset({"retries", "timeout"})


class RateQueueBackend(BaseTaskBackend):
    """Run ``django.tasks`` tasks as ratequeue jobs on the django-q2 cluster."""

    supports_defer = True
    # An async def task runs as arun_task, on the worker's event loop.
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTION_NAMES)
        if unknown:
            raise ImproperlyConfigured(
                f"Unknown OPTIONS {', '.join(unknown)} for the task backend {alias!r}; "
                f"known: {', '.join(sorted(OPTION_NAMES))}."
            )
        defaults = JobOptions(dict(self.options))
        try:
            defaults.template(function_path(run_task))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"Bad OPTIONS for the task backend {alias!r}: {exc}"
            ) from exc
        except ImproperlyConfigured:
            # RATEQUEUE itself is invalid: its system checks say how (Django's check of
            # TASKS builds this backend, and must not fail before they run).
            pass
        self.job: JobFunction[..., Any] = JobFunction(run_task, defaults)
        self.async_job: JobFunction[..., Any] = JobFunction.of(arun_task, defaults)

    def validate_task(self, task: Task[..., Any]) -> None:
        """Refuse what cannot run here, and register the rest.

        django.tasks calls this when a task for this backend is defined (and for each
        ``.using()`` copy), and enqueue calls it again. A task defined after start-up is
        refused, as a worker would refuse it."""
        super().validate_task(task)
        try:
            QueueChoice.coerce(task.queue_name)
            register_task(task)
        except ValueError as exc:  # UnknownJob is one
            raise InvalidTask(str(exc)) from None

    def enqueue(
        self, task: Task[_P, _R], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult[_P, _R]:
        self.validate_task(task)
        check_findable(task)
        # What the framework's own backends do, so the same calls fail the same way: a
        # TypeError for a value JSON cannot hold, tuples as lists, bytes as text.
        args = cast("list[Any]", normalize_json(args))
        kwargs = cast("dict[str, Any]", normalize_json(kwargs))
        # The job as written, not read back: a cluster may start it at once, and the result
        # of an enqueue is READY, as django.tasks says (not RUNNING).
        # The task's run_after is kept as given: the job's start_at moves with its retries.
        run_after = task.run_after.isoformat() if task.run_after is not None else None
        runner = self.async_job if iscoroutinefunction(task.func) else self.job
        written = enqueue_job(
            runner.using(queue=task.queue_name, priority=task.priority, start_at=task.run_after),
            args=[],
            kwargs={"task": task.module_path, "args": list(args), "kwargs": dict(kwargs),
                    "backend": self.alias, "run_after": run_after},
        )  # fmt: skip
        result = task_result(written, attempts=[], task=task)
        # The job is written: a receiver that raises is logged, and does not undo it.
        task_enqueued.send_robust(type(self), task_result=result)
        return cast("TaskResult[_P, _R]", result)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Run Django's checks of a backend, and check that django_ratequeue is installed.

        ``manage.py check`` runs this for every TASKS entry."""
        problems = list(super().check(**kwargs))
        if not apps.is_installed("django_ratequeue"):
            problems.append(
                Error(
                    f"TASKS[{self.alias!r}] uses {BACKEND_PATH}, but django_ratequeue is not "
                    "in INSTALLED_APPS.",
                    hint="Add 'django_ratequeue' to INSTALLED_APPS, then run manage.py migrate.",
                    id=ids.TASKS_BACKEND_WITHOUT_APP,
                )
            )
        return problems

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """Return the result of the job ``result_id``: its row, and the attempts read after it."""
        try:
            job = Job.objects.get(pk=result_id, func__in=TASK_JOBS)
        except Job.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None
        # Read after the job, they hold at least the attempts it counts; later ones are not
        # part of what it says.
        attempts = list(
            Attempt.objects.filter(job=job, number__lte=job.attempts).order_by("number")
        )
        current = attempts[-1] if attempts else None
        if (
            job.status == Status.RUNNING
            and current is not None
            and current.number == job.attempts
            and current.ended_at is not None
        ):
            # Its attempt ended, and the job, as read, was not told yet: what the loop makes
            # of that end, by the loop's own rule, as of the end (not saved).
            job.settle(current, now=current.ended_at)
        return task_result(job, attempts)


def check_findable(task: Task[..., Any]) -> None:
    """Refuse at enqueue a task that is not at its own name (``module_path``).

    Workers and other processes look it up there. It is read from the imported module,
    never imported."""
    module, _, name = task.module_path.rpartition(".")
    found = getattr(sys.modules.get(module), name, None)
    if not isinstance(found, Task) or found.func is not task.func:
        raise InvalidTask(
            f"{task.module_path!r} is not a task a worker can find: define the task with @task "
            "at the top level of a module, under the name of its function."
        )


def run_task(
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    run_after: str | None = None,
) -> Any:
    """Run the task ``task`` on a ratequeue worker: the job the backend enqueues.

    It sends ``task_started`` before and ``task_finished`` after each attempt.
    (``run_after``, the task's own in ISO 8601, is there for the results read back from
    the job.)

    A failure is re-raised for the engine to record and retry by the job's policy, so a
    ``task_finished`` with FAILED may be followed by another ``task_started``.
    """
    function, result, sender = task_started_now(task, backend)
    try:
        value = function.call(*context_args(function, result), *args, **kwargs)
        value = stored_value(value)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the runner fails all three
        task_failed(sender, result, task_error(exc))
        raise
    task_succeeded(sender, result, value)
    return value


async def arun_task(
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    run_after: str | None = None,
) -> Any:
    """Run an ``async def`` task on a ratequeue worker, as :func:`run_task` runs others.

    Its coroutine runs on the worker's event loop; the signals are sent from Django's
    thread for sync code, where receivers may use the ORM."""
    function, result, sender = await sync_to_async(task_started_now)(task, backend)
    try:
        value = await function.acall(*context_args(function, result), *args, **kwargs)
        value = stored_value(value)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        error, traceback = task_error(exc), exc.__traceback__
        try:
            await sync_to_async(task_failed)(sender, result, error)
        finally:
            exc.__traceback__ = traceback  # asgiref raises it again in its thread
        raise
    await sync_to_async(task_succeeded)(sender, result, value)
    return value


def task_started_now(
    task: str, backend: str
) -> tuple[Task[..., Any], TaskResult[..., Any], type[RateQueueBackend]]:
    """Send ``task_started``; return the task ``task``, its result and the signals' sender.

    The result is the task's as it starts."""
    attempt = current_attempt.get()
    if attempt is None:
        raise RuntimeError("run_task runs inside a ratequeue worker's attempt only.")
    runner = task_backends[backend]
    if not isinstance(runner, RateQueueBackend):
        raise ImproperlyConfigured(
            f"TASKS[{backend!r}] must use {BACKEND_PATH} in the worker's settings too."
        )
    function = resolve_task(task)
    result = runner.get_result(attempt.job_id)
    # Receivers that raise are logged (send_robust) and change nothing: the task runs,
    # and a finished one is not failed by them.
    sender = type(runner)
    task_started.send_robust(sender, task_result=result)
    return function, result, sender


def context_args(function: Task[..., Any], result: TaskResult[..., Any]) -> list[Any]:
    """Return the arguments that go first: the TaskContext, for a task that takes one."""
    return [TaskContext(task_result=result)] if function.takes_context else []


def stored_value(value: Any) -> Any:
    """Return a task's return value as the job stores it.

    A value the job cannot store fails here, not after ``task_finished`` says
    SUCCESSFUL."""
    value = normalize_json(value)
    check_result_size(value)
    return value


def task_succeeded(sender: type, result: TaskResult[..., Any], value: Any) -> None:
    _finish(result, TaskResultStatus.SUCCESSFUL, _return_value=value)
    task_finished.send_robust(sender, task_result=result)


def task_error(exc: BaseException) -> TaskError:
    return TaskError(
        exception_class_path=plain.class_path(exc), traceback=plain.traceback_text(exc)
    )


def task_failed(sender: type, result: TaskResult[..., Any], error: TaskError) -> None:
    """Record ``error`` on the result and send ``task_finished``.

    It is called inside the handler of the task's exception (``sync_to_async`` carries it
    to its thread), where Django's own receiver logs it from."""
    _finish(result, TaskResultStatus.FAILED, errors=[*result.errors, error])
    task_finished.send_robust(sender, task_result=result)


if HAS_DJANGO_TASKS:
    # The jobs the backend enqueues (arun_task for async def tasks), registered wherever
    # the app runs; the tasks they run are registered apart, as they are defined.
    job(run_task)
    job(arun_task)


def _finish(result: TaskResult[..., Any], status: TaskResultStatus, **values: Any) -> None:
    # TaskResult is frozen: the framework's own backends update it this way too.
    finished: dict[str, Any] = {"status": status, "finished_at": timezone.now(), **values}
    for name, value in finished.items():
        object.__setattr__(result, name, value)


@register()
def check_django_version(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse, before Django 6.0, the TASKS entries that use this backend.

    Before Django 6.0 nothing reads TASKS, so only this check can say the backend won't
    run."""
    if HAS_DJANGO_TASKS:
        return []
    tasks: dict[str, dict[str, Any]] = getattr(settings, "TASKS", {})
    return [
        Error(
            f"TASKS[{alias!r}] uses {BACKEND_PATH}, which needs Django 6.0 or later.",
            hint="Upgrade Django, or enqueue with django_ratequeue.enqueue() instead.",
            id=ids.TASKS_BACKEND_NEEDS_DJANGO_6,
        )
        for alias, params in tasks.items()
        if params.get("BACKEND") == BACKEND_PATH
    ]


__all__ = ["RateQueueBackend", "arun_task", "run_task"]

"""The django.tasks backend (Django 6.0+): enqueue, results, signals and validation."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.tasks import TaskResultStatus, task, task_backends
from django.tasks.checks import check_tasks
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from django.utils import timezone

from django_ratequeue import Status, enqueue, get_handle
from django_ratequeue.backends import BACKEND_PATH, RateQueueBackend
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Attempt, Job
from django_ratequeue.task_results import attempt_error
from tests.cluster import wait_for
from tests.queue.steps import leading_loop, run_pass
from tests.tasks_backend import tasks

pytestmark = pytest.mark.django_db


def only_job() -> Job:
    (job,) = Job.objects.all()
    return job


def test_enqueue_honours_queue_priority_and_run_after() -> None:
    run_after = timezone.now() + timedelta(hours=1)
    sent: list[Any] = []

    def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
        sent.append((sender, task_result.id))

    task_enqueued.connect(receive)
    try:
        result = tasks.add.using(priority=7, queue_name="emails", run_after=run_after).enqueue(
            1, b=2
        )
    finally:
        task_enqueued.disconnect(receive)

    job = only_job()
    assert (job.id, job.queue, job.priority, job.start_at) == (result.id, "emails", 7, run_after)
    assert job.status == Status.SCHEDULED
    assert sent == [(RateQueueBackend, result.id)]
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([1], {"b": 2}, "default")
    assert result.enqueued_at == job.created_at
    assert result.task.run_after == run_after
    assert (result.started_at, result.finished_at, result.errors, result.attempts) == (
        None,
        None,
        [],
        0,
    )

    again = tasks.add.get_result(result.id)
    assert (again.status, again.task.queue_name, again.task.priority) == (
        TaskResultStatus.READY,
        "emails",
        7,
    )
    assert again.task.func is tasks.add.func
    # Read back, the result is the one enqueue gave, its task's run_after included.
    assert again.task.run_after == run_after
    assert again == result


def test_defaults_go_to_the_default_queue_now() -> None:
    before = timezone.now()
    result = tasks.add.enqueue(1, 2)
    job = only_job()
    assert (job.queue, job.priority, job.status) == ("default", 0, Status.WAITING)
    assert before <= job.start_at <= timezone.now()
    assert job.kwargs == {
        "task": "tests.tasks_backend.tasks.add",
        "args": [1, 2],
        "kwargs": {},
        "backend": "default",
        "run_after": None,
    }
    assert result.id == job.id
    assert tasks.add.get_result(result.id) == result


def backend_settings(**params: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": BACKEND_PATH, "QUEUES": [], **params}}


def test_options_are_the_jobs_defaults() -> None:
    with override_settings(TASKS=backend_settings(OPTIONS={"retries": 2, "timeout": 30})):
        tasks.add.enqueue(1, 2)
    job = only_job()
    assert (job.retry["retry_count"], job.timeout) == (2, 30)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"colour": "red"}, "Unknown OPTIONS colour"),
        ({"queue": "emails"}, "Unknown OPTIONS queue"),
        ({"retries": -1}, "retries must be an integer from 0"),
        ({"timeout": 0}, "timeout must be more than 0"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with (
        override_settings(TASKS=backend_settings(OPTIONS=options)),
        pytest.raises(ImproperlyConfigured, match=message),
    ):
        task_backends["default"]


def test_an_invalid_ratequeue_setting_is_reported_by_check_not_raised() -> None:
    """Django's check of TASKS builds the backend afresh: a RATEQUEUE the app's own checks
    refuse must reach them (E001), not fail the backend's construction first."""
    with override_settings(TASKS=backend_settings(), RATEQUEUE={"MAX_CONCURENCY": 3}):
        errors = checks.run_checks()
    assert [e.id for e in errors] == ["django_ratequeue.E001"]


def test_validate_task_refuses_what_cannot_run() -> None:
    with pytest.raises(InvalidTask, match="between -100 and 100"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="module level"):
        task(lambda: None)
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(takes_context=True)(tasks.not_a_task)
    with pytest.raises(InvalidTask, match="non-empty string of at most 200"):
        tasks.add.using(queue_name="q" * 201)
    with (
        override_settings(TASKS=backend_settings(QUEUES=["default"])),
        pytest.raises(InvalidTask, match="Queue 'emails' is not valid"),
    ):
        tasks.add.using(queue_name="emails")
    assert not Job.objects.exists()


def test_a_task_workers_cannot_import_is_refused_and_nothing_is_written() -> None:
    with pytest.raises(InvalidTask, match="define the task with @task at the top level"):
        tasks.renamed.enqueue(1)
    assert not Job.objects.exists()


def test_arguments_must_be_json_as_for_djangos_own_backends() -> None:
    for args, kwargs in [((1, object()), {}), ((1,), {"b": {1, 2}})]:
        with pytest.raises(TypeError, match="Unsupported type"):
            tasks.add.enqueue(*args, **kwargs)
    assert not Job.objects.exists()
    # As the framework does, tuples become lists and bytes text.
    result = tasks.add.enqueue((1, 2), b=b"x")
    assert (result.args, result.kwargs) == ([[1, 2]], {"b": "x"})
    assert only_job().kwargs["args"] == [[1, 2]]


def test_get_result_of_an_unknown_id() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("nope")
    # A plain ratequeue job is not a task's result.
    plain = enqueue("tests.queue.jobs.add", args=[1, 2])
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(plain.id)


def failed_attempt(outcome: str, traceback: str, error: str = "", path: str = "") -> Attempt:
    now = timezone.now()
    return Attempt(
        number=1,
        dispatched_at=now,
        started_at=now,
        ended_at=now,
        outcome=outcome,
        error=error,
        traceback=traceback,
        worker="worker-1",
        exception_class_path=path,
    )


def test_an_attempts_error_class_is_the_one_stored_with_it() -> None:
    error = attempt_error(failed_attempt("failed", "Traceback...", "ValueError: x", "a.B"))
    assert (error.exception_class_path, error.traceback) == ("a.B", "Traceback...")
    lost = attempt_error(failed_attempt("worker_lost", "", "The worker died.", "x.WorkerLost"))
    assert (lost.exception_class_path, lost.traceback) == ("x.WorkerLost", "The worker died.")
    # An attempt that ended before attempts kept their class.
    assert attempt_error(failed_attempt("failed", "")).exception_class is Exception


def settle(*results: Any) -> None:
    """Run the loop in this process until every result is finished."""

    def settled() -> bool:
        run_pass()  # starts, runs its batch, takes in the outcomes
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    wait_for(settled, timeout=30, message="every task to finish")


def test_an_exception_group_keeps_its_class() -> None:
    result = tasks.fail_together.enqueue()
    settle(result)
    assert [e.exception_class for e in result.errors] == [ExceptionGroup, ExceptionGroup]
    assert "ValueError: second" in result.errors[-1].traceback


def test_a_result_read_back_keeps_the_tasks_run_after() -> None:
    """The task as it was enqueued, although its job's start_at moves with each retry."""
    run_after = timezone.now() - timedelta(minutes=5)
    result = tasks.break_down.using(run_after=run_after).enqueue("twice")
    settle(result)
    assert result.attempts == 2
    assert Job.objects.get(pk=result.id).start_at > run_after  # the retry's
    assert tasks.break_down.get_result(result.id).task.run_after == run_after


def test_equal_priorities_start_oldest_run_after_first(settings: Any) -> None:
    """As django-tasks-db orders tasks: priority, then run_after (one at a time here)."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 1}
    now = timezone.now()
    old = tasks.add.using(priority=20, run_after=now - timedelta(hours=2)).enqueue(1, 1)
    very_old = tasks.add.using(priority=20, run_after=now - timedelta(hours=10)).enqueue(2, 2)
    future = tasks.add.using(priority=30, run_after=now + timedelta(hours=10)).enqueue(3, 3)
    high = tasks.add.using(priority=10).enqueue(4, 4)
    low = tasks.add.using(priority=-2).enqueue(5, 5)
    plain = tasks.add.enqueue(6, 6)
    settle(old, very_old, high, low, plain)
    started = sorted([old, very_old, high, low, plain], key=lambda result: result.started_at)
    assert [r.id for r in started] == [r.id for r in (very_old, old, high, plain, low)]
    future.refresh()
    assert future.status == TaskResultStatus.READY


def signal_lines(path: Path, result_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line["id"] == result_id]


def test_a_task_that_exits_fails_alone_and_the_tasks_behind_it_run(settings: Any) -> None:
    """Twelve tasks dealt behind one that calls sys.exit, in one batch: it fails (its
    error is SystemExit, by its retry policy, and task_finished says so), they run once
    each; no worker is lost."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 20}
    leaving = tasks.leave.using(priority=1).enqueue(3)
    added = [tasks.add.enqueue(i, i) for i in range(12)]
    finished: list[tuple[str, TaskResultStatus]] = []

    def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
        finished.append((task_result.id, task_result.status))

    def settled() -> bool:
        run_pass()  # starts, runs its batch, takes in the outcomes
        for result in [leaving, *added]:
            result.refresh()
        return all(result.is_finished for result in [leaving, *added])

    task_finished.connect(receive)
    try:
        wait_for(settled, timeout=30, message="every task to finish")
    finally:
        task_finished.disconnect(receive)
    assert leaving.status == TaskResultStatus.FAILED and leaving.attempts == 2
    assert [e.exception_class for e in leaving.errors] == [SystemExit, SystemExit]
    assert [s for i, s in finished if i == leaving.id] == [TaskResultStatus.FAILED] * 2
    for result in added:
        assert (result.status, result.attempts) == (TaskResultStatus.SUCCESSFUL, 1)
    assert [r.return_value for r in added] == [2 * i for i in range(12)]


def test_tasks_run_on_the_cluster(
    cluster: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "signals.jsonl"
    monkeypatch.setenv(tasks.SIGNAL_LOG, str(log))
    cluster(workers=2)
    soon = timezone.now() + timedelta(seconds=1)
    added = tasks.add.enqueue(2, 3)
    deferred = tasks.add.using(run_after=soon).enqueue(4, 5)
    broke = tasks.break_down.enqueue("no luck")
    divided = tasks.divide.enqueue(1, 0)
    introspected = tasks.introspect.enqueue("hello")
    awaited = tasks.add_later.enqueue(20, 22)
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(0, 0)
    get_handle(later.id).cancel()

    everything = [added, deferred, broke, divided, introspected, awaited, later]

    def all_finished() -> bool:
        for result in everything:
            result.refresh()
        return all(result.is_finished for result in everything)

    wait_for(all_finished, timeout=60, message="every task to finish")

    assert added.status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5
    assert (added.attempts, added.errors) == (1, [])
    assert added.enqueued_at <= added.started_at <= added.finished_at
    assert added.last_attempted_at == added.started_at
    assert tasks.add.get_result(added.id).return_value == 5

    assert deferred.return_value == 9
    assert deferred.started_at >= soon

    assert introspected.return_value == {"label": "hello", "id": introspected.id, "attempt": 1}
    assert awaited.return_value == 42

    # One quick retry (tests/settings.py), so two attempts and two errors.
    assert broke.status == TaskResultStatus.FAILED
    assert broke.attempts == 2
    assert [e.exception_class for e in broke.errors] == [tasks.TaskBroke, tasks.TaskBroke]
    assert "raise TaskBroke(message)" in broke.errors[-1].traceback
    assert "TaskBroke: no luck" in broke.errors[-1].traceback
    assert broke.started_at < broke.last_attempted_at <= broke.finished_at
    with pytest.raises(ValueError, match="Task failed"):
        broke.return_value  # noqa: B018

    assert [e.exception_class_path for e in divided.errors] == ["builtins.ZeroDivisionError"] * 2

    assert later.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in later.errors] == [
        "django_ratequeue.exceptions.JobCanceled"
    ]
    assert later.attempts == 0

    # The framework's signals, seen by a receiver in the worker processes.
    assert [(s["signal"], s["status"]) for s in signal_lines(log, added.id)] == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]
    broke_signals = signal_lines(log, broke.id)
    assert [(s["signal"], s["status"], s["attempts"]) for s in broke_signals] == [
        ("enqueued", "READY", 0),
        ("started", "RUNNING", 1),
        ("finished", "FAILED", 1),
        ("started", "RUNNING", 2),
        ("finished", "FAILED", 2),
    ]
    assert broke_signals[-1]["errors"] == ["tests.tasks_backend.tasks.TaskBroke"] * 2


@pytest.fixture
def finished_signals() -> Any:
    """The (id, status) of every task_finished sent while the test runs."""
    sent: list[tuple[str, TaskResultStatus]] = []

    def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
        sent.append((task_result.id, task_result.status))

    task_finished.connect(receive)
    yield sent
    task_finished.disconnect(receive)


def test_a_result_that_cannot_be_stored_is_never_announced_as_successful(
    finished_signals: list[tuple[str, TaskResultStatus]],
) -> None:
    result = tasks.not_a_number.enqueue()
    settle(result)
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [ValueError, ValueError]
    assert "Out of range float values are not JSON compliant" in result.errors[0].traceback
    assert finished_signals == [(result.id, TaskResultStatus.FAILED)] * 2


def test_receivers_that_raise_change_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def broken(sender: type, task_result: Any, **kwargs: Any) -> None:
        raise RuntimeError("a broken receiver")

    for signal in (task_enqueued, task_started, task_finished):
        signal.connect(broken)
    try:
        result = tasks.add.enqueue(1, 2)
        settle(result)
    finally:
        for signal in (task_enqueued, task_started, task_finished):
            signal.disconnect(broken)
    assert (result.status, result.attempts, result.errors) == (
        TaskResultStatus.SUCCESSFUL,
        1,
        [],
    )
    assert result.return_value == 3
    # Logged by the signal, once per signal.
    logged = [r for r in caplog.records if r.name == "django.dispatch"]
    assert [str(r.exc_info[1]) for r in logged if r.exc_info] == ["a broken receiver"] * 3


def test_a_result_outlives_its_queue_in_the_settings() -> None:
    with override_settings(TASKS=backend_settings(QUEUES=["default", "emails"])):
        result = tasks.add.using(queue_name="emails", priority=3).enqueue(1, 2)
        settle(result)
    with override_settings(TASKS=backend_settings(QUEUES=["default"])):
        again = tasks.add.get_result(result.id)
    assert (again.status, again.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
    assert (again.task.queue_name, again.task.priority) == ("emails", 3)


def run_without_loop(*results: Any) -> None:
    """Start the jobs and run their attempts, but no loop afterwards (as when the cluster
    stopped): the jobs stay RUNNING in their rows, their attempts ended."""
    loop = leading_loop()
    loop.step()
    Runner("a-worker").drain()
    for result in results:
        assert Job.objects.get(pk=result.id).status == Status.RUNNING


def test_a_job_whose_attempt_ended_while_no_loop_ran_shows_its_outcome() -> None:
    added = tasks.add.enqueue(1, 2)
    broke = tasks.break_down.enqueue("once")  # one retry left
    with override_settings(TASKS=backend_settings(OPTIONS={"retries": 0})):
        broke_for_good = tasks.break_down.enqueue("for good")
        run_without_loop(added, broke, broke_for_good)
        for result in (added, broke, broke_for_good):
            result.refresh()
    attempts = {a.job_id: a for a in Attempt.objects.all()}
    assert (added.status, added.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
    assert added.finished_at == attempts[added.id].ended_at
    assert (broke.status, broke.finished_at) == (TaskResultStatus.READY, None)
    assert broke_for_good.status == TaskResultStatus.FAILED
    assert broke_for_good.finished_at == attempts[broke_for_good.id].ended_at
    for result in (broke, broke_for_good):
        assert [e.exception_class for e in result.errors] == [tasks.TaskBroke]
    # Once a loop runs, the rows say the same (finished_at is then the loop's time).
    run_pass()
    assert Job.objects.get(pk=added.id).status == Status.COMPLETE
    assert Job.objects.get(pk=broke_for_good.id).status == Status.FAILED


def test_the_backends_check_says_when_the_app_is_not_installed(settings: Any) -> None:
    assert list(check_tasks()) == []
    without = [app for app in settings.INSTALLED_APPS if app != "django_ratequeue"]
    with override_settings(INSTALLED_APPS=without):
        problems = list(check_tasks())  # Django's check of every TASKS backend
    assert [(p.id, p.msg) for p in problems] == [
        (
            "django_ratequeue.E310",
            f"TASKS['default'] uses {BACKEND_PATH}, but django_ratequeue is not in "
            "INSTALLED_APPS.",
        )
    ]
    assert "Add 'django_ratequeue' to INSTALLED_APPS" in (problems[0].hint or "")


class StepAfterJobRead:
    """An execute wrapper that runs one step of the loop right after the first read of the
    jobs table, before the next statement: a read that races the loop, made to lose."""

    def __init__(self) -> None:
        self.job_read = self.stepped = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.job_read and not self.stepped:
            self.stepped = True  # first: the step's own statements pass through here too
            leading_loop().step()
        result = execute(sql, params, many, context)
        self.job_read |= sql.lstrip().startswith("SELECT") and Job._meta.db_table in sql
        return result


def test_a_read_that_races_the_loop_taking_a_failure_in_says_failed() -> None:
    """Read between the loop's step, which takes the failed attempt in, and what went
    before: the result still says FAILED, when it finished and why, as before the step and
    after it."""
    with override_settings(TASKS=backend_settings(OPTIONS={"retries": 0})):
        result = tasks.break_down.enqueue("for good")
        run_without_loop(result)
        racing = StepAfterJobRead()
        with connection.execute_wrapper(racing):
            result.refresh()
    assert racing.stepped
    assert Job.objects.get(pk=result.id).status == Status.FAILED  # the step took it in
    (attempt,) = Attempt.objects.all()
    assert (result.status, result.finished_at) == (TaskResultStatus.FAILED, attempt.ended_at)
    assert [e.exception_class for e in result.errors] == [tasks.TaskBroke]

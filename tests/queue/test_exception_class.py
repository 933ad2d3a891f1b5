"""The class of what a job raised is stored on its attempts and job, not read back from
tracebacks: ``AttemptInfo.exception_class_path`` and ``JobFailed.exception_class_path``.

The loop and the runner run step by step in this process."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_ratequeue import Handle, JobFailed, enqueue
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.runner import Runner
from django_ratequeue.exceptions import AttemptTimedOut, WorkerLost, class_path
from django_ratequeue.models import Attempt, Job
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass

pytestmark = pytest.mark.django_db


def failure(handle: Handle) -> JobFailed:
    run_pass()  # starts the job and runs its batch inline
    run_pass()  # takes in the outcome
    with pytest.raises(JobFailed) as failed:
        handle.result(timeout=0)
    return failed.value


@pytest.mark.parametrize(
    ("func", "path"),
    [
        (jobs.fail, "builtins.ValueError"),
        (jobs.fail_hard, "django_ratequeue.exceptions.NonRetryableError"),
        (jobs.exit_worker, "builtins.SystemExit"),
        (jobs.return_nul, "builtins.ValueError"),  # a result that cannot be stored
        # Its traceback's last exception line is the ValueError inside.
        (jobs.fail_together, "builtins.ExceptionGroup"),
    ],
)
def test_the_class_a_job_raised_is_kept(func: Any, path: str) -> None:
    handle = enqueue(func, retries=0)
    failed = failure(handle)
    assert failed.exception_class_path == path
    assert list(Attempt.objects.values_list("exception_class_path", flat=True)) == [path]
    assert [a.exception_class_path for a in handle.attempts()] == [path]
    assert Job.objects.get(pk=handle.id).exception_class_path == path


def test_a_hostile_class_path_is_stored_escaped_and_cut() -> None:
    handle = enqueue(jobs.fail_with_a_hostile_class, retries=0)
    path = failure(handle).exception_class_path
    limit = ratequeue_settings().MAX_ERROR_BYTES
    assert path.startswith("a\\x00bccc") and path.endswith("ccc.Hostile")
    assert len(path.encode()) <= limit and "bytes cut" in path


def test_a_job_that_succeeds_after_a_failure_keeps_no_class(tmp_path: Any) -> None:
    handle = enqueue(jobs.fail_once, args=[str(tmp_path / "marker")], retries=1)
    run_pass()
    run_pass()
    Job.objects.filter(pk=handle.id).update(start_at=timezone.now())  # retry now
    run_pass()
    run_pass()
    assert handle.status() == "complete"
    assert [a.exception_class_path for a in handle.attempts()] == ["builtins.RuntimeError", ""]
    assert Job.objects.get(pk=handle.id).exception_class_path == ""


def recovered_attempt(worker: str, *, started_ago: float = 0, timeout: float | None = None) -> Any:
    """A job whose only attempt a runner claimed ``started_ago`` seconds ago, then nothing."""
    handle = enqueue(jobs.sleep, args=[0], retries=0, timeout=timeout)
    loop = leading_loop()
    loop.step()
    (attempt,) = Runner(worker).claim()
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=timezone.now() - timedelta(seconds=started_ago)
    )
    return handle


def test_an_attempt_whose_worker_died_is_a_worker_lost() -> None:
    handle = recovered_attempt("a-dead-worker")  # never sent a heartbeat
    failed = failure(handle)
    assert failed.exception_class_path == class_path(WorkerLost)
    assert [a.outcome for a in handle.attempts()] == ["worker_lost"]


def test_an_attempt_found_overrunning_its_timeout_is_timed_out() -> None:
    handle = recovered_attempt(beat(force=True), started_ago=3600, timeout=1)
    failed = failure(handle)
    assert failed.exception_class_path == class_path(AttemptTimedOut)
    assert [a.outcome for a in handle.attempts()] == ["timed_out"]

"""The worker terminal talks: a qcluster whose LOGGING is silent on the lifecycle prints a
line per job's start and end, failures at WARNING with their error and what follows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from django_ratequeue import Status, enqueue
from django_ratequeue.models import Job
from django_ratequeue.signals import logger as lifecycle
from django_ratequeue.signals import talk
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import freeze, run_pass

pytestmark = pytest.mark.django_db(transaction=True)
ONE_QUICK_RETRY = {"retry_count": 1, "initial_interval": 1, "randomize_interval": False}


@contextmanager
def unconfigured() -> Iterator[logging.Logger]:
    """Take away every handler and level of the root, package and lifecycle loggers (as a
    project without LOGGING has them: pytest's own handlers too, so inside the test's
    body), and give them back after; yield the package's."""
    loggers = [logging.getLogger(), logging.getLogger("django_ratequeue"), lifecycle]
    kept = [(one, list(one.handlers), one.level) for one in loggers]
    for one in loggers[1:]:
        one.handlers.clear()
        one.setLevel(logging.NOTSET)
    loggers[0].handlers.clear()
    yield loggers[1]
    for one, handlers, level in kept:
        one.handlers[:] = handlers
        one.setLevel(level)


def test_a_worker_prints_each_start_and_end(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATEQUEUE_TEST_NO_LOGGING", "1")
    done = enqueue(jobs.add, args=[2, 3], queue="a")
    failed = enqueue(jobs.fail, args=["the first line\nand a second"], retries=ONE_QUICK_RETRY)
    # A function the worker no longer knows (a deploy renamed it): UnknownJob, once the
    # short patience has passed with no worker that knows it.
    gone = enqueue(jobs.add, args=[1, 1])
    Job.objects.filter(pk=gone.id).update(func="tests.queue.jobs.renamed")
    running = cluster(workers=1, UNKNOWN_JOB_PATIENCE=1.0)
    for handle in (done, failed, gone):
        wait_for(lambda h=handle: h.status() in (Status.COMPLETE, Status.FAILED), timeout=60)

    def said(*parts: str) -> bool:
        return any(all(p in line for p in parts) for line in running.output().splitlines())

    wait_for(lambda: said(f"[{failed.id}] failed", "job failed"), timeout=30)
    assert said("[ratequeue] INFO", f"tests.queue.jobs.add[{done.id}] started on queue 'a'")
    assert said("[ratequeue] INFO", f"tests.queue.jobs.add[{done.id}] succeeded in ")
    assert said("[ratequeue] INFO Worker ", " leads the main loop (generation ")
    assert said("WARNING", f"[{failed.id}] failed after ", "ValueError: the first line; retry at")
    assert not said("and a second")
    # The loop fails it (no worker could run it): its recovery says why.
    assert said("WARNING Recovered attempt", gone.id, "non_retryable", "tests.queue.jobs.renamed")
    # The attempt's end told it: no second line for a job that completed or failed.
    assert not said(f"[{done.id}] complete after")


def test_without_logging_a_worker_prints_at_info() -> None:
    with unconfigured() as package:
        talk()
        assert package.level == logging.INFO
        assert [type(h) for h in package.handlers] == [logging.StreamHandler]


def test_logging_that_names_the_logger_keeps_the_say() -> None:
    with unconfigured() as package:
        lifecycle.setLevel(logging.WARNING)  # what LOGGING's "level": "WARNING" does
        talk()
        assert package.handlers == [] and lifecycle.level == logging.WARNING


def test_failures_are_warnings_with_what_follows(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    frozen = freeze(monkeypatch)
    with caplog.at_level(logging.INFO, logger="django_ratequeue.lifecycle"):
        failed = enqueue(jobs.fail, retries=ONE_QUICK_RETRY)
        canceled = enqueue(jobs.add, args=[1, 1], run_after=600)
        run_pass()
        canceled.cancel()
        for _ in range(4):
            frozen.advance(1.5)
            run_pass()
    ends = [r for r in caplog.records if getattr(r, "event", "") == "attempt_finished"]
    assert [(r.levelname, r.status) for r in ends] == [  # type: ignore[attr-defined]
        ("WARNING", "retrying"),
        ("WARNING", "failed"),
    ]
    assert ends[0].retry_at and ends[1].retry_at is None  # type: ignore[attr-defined]
    assert ends[0].getMessage().endswith(f"ValueError: boom; retry at {ends[0].retry_at}")  # type: ignore[attr-defined]
    assert ends[1].getMessage().endswith("ValueError: boom; job failed")
    said = [r.getMessage() for r in caplog.records]
    assert f"tests.queue.jobs.add[{canceled.id}] canceled after 0 attempts" in said
    assert f"tests.queue.jobs.fail[{failed.id}] failed after 2 attempts" in said


def test_at_warning_failures_alone_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    """LOGGING's "level": "WARNING" on the lifecycle: the failures, and nothing else."""
    with caplog.at_level(logging.WARNING, logger="django_ratequeue.lifecycle"):
        done = enqueue(jobs.add, args=[1, 2])
        failed = enqueue(jobs.fail, retries=0)
        run_pass()
        run_pass()
    logged = [r for r in caplog.records if r.name == "django_ratequeue.lifecycle"]
    assert [(r.levelname, r.job_id) for r in logged] == [("WARNING", failed.id)]  # type: ignore[attr-defined]
    assert done.result(timeout=0) == 3

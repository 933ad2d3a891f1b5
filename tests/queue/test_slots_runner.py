"""A runner with its slots, in process, step by step: claims while slots are busy, a slow
plain job beside quick async ones, time limits of both kinds, a cancel reaching a running
job, and the report that comes before the next claim. The slots' threads use connections
of their own: these tests commit (``transaction=True``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from django_ratequeue import JobCanceled, JobFailed, Status, enqueue
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Attempt
from django_ratequeue.engine.pool import Pool
from django_ratequeue.engine.runner import Runner
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = pytest.mark.django_db(transaction=True)


def runner_with(size: int) -> Runner:
    return Runner(beat(force=True), Pool(size, lambda finished: None, name="ratequeue-test"))


def serve_until(runner: Runner, condition: Any, message: str) -> None:
    """Take turns (claims, starts, reports) and loop passes until ``condition()``."""
    loop = leading_loop()

    def step() -> Any:
        loop.step()
        runner.turn()
        runner.waiter.wait(0.05)
        return condition()

    wait_for(step, 30, message)


@pytest.fixture(autouse=True)
def roomy(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 20}


def test_quick_async_jobs_run_beside_a_slow_plain_one(tmp_path: Path) -> None:
    release = tmp_path / "release"
    slow = enqueue(jobs.block_until_file, args=[str(tmp_path / "log"), str(release)])
    quick = [enqueue(jobs.add_later, args=[n, n]) for n in range(5)]
    runner = runner_with(3)
    serve_until(runner, lambda: all(h.status() == Status.COMPLETE for h in quick), "quick")
    assert [h.result(timeout=0) for h in quick] == [2 * n for n in range(5)]
    assert slow.status() == Status.RUNNING
    release.touch()
    serve_until(runner, lambda: slow.status() == Status.COMPLETE, "the slow one")


def test_a_runner_claims_no_more_than_its_free_slots(tmp_path: Path) -> None:
    release = tmp_path / "release"
    for _ in range(4):
        enqueue(jobs.block_until_file, args=[str(tmp_path / "log"), str(release)])
    leading_loop().step()
    runner = runner_with(3)
    runner.turn()
    assert len(runner.held) == 3 and runner.pool.free == 0
    assert Attempt.objects.filter(worker="").count() == 1  # left for another runner
    release.touch()
    serve_until(runner, lambda: not Attempt.objects.filter(ended_at=None).exists(), "all four")


@pytest.mark.parametrize("func", [jobs.spin, jobs.sleep_later])
def test_a_job_past_its_timeout_ends_timed_out_and_frees_its_slot(func: Any) -> None:
    handle = func.using(timeout=0.3, retries=0).enqueue(30)
    runner = runner_with(1)
    serve_until(runner, lambda: handle.status() == Status.FAILED, "the timeout")
    (attempt,) = handle.attempts()
    assert attempt.outcome == "timed_out"
    with pytest.raises(JobFailed, match=r"timeout of 0\.3 seconds"):
        handle.result(timeout=0)
    assert runner.pool.free == 1


@pytest.mark.parametrize(("func", "args"), [(jobs.sleep_later, [30]), (jobs.wait_for_cancel, [])])
def test_a_cancel_reaches_a_running_job(func: Any, args: list[Any]) -> None:
    handle = enqueue(func, args=args)
    runner = runner_with(1)
    serve_until(runner, lambda: handle.status() == Status.RUNNING and runner.held, "the start")
    canceled_at = time.monotonic()
    handle.cancel()
    serve_until(runner, lambda: handle.status() == Status.CANCELED, "the cancel")
    with pytest.raises(JobCanceled):
        handle.result(timeout=0)
    assert time.monotonic() - canceled_at < 25  # it stopped: it did not run its 30 s
    assert runner.pool.free == 1

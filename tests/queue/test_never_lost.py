"""Work that is never lost or miscounted: attempts dispatched but never claimed, jobs that
try to end their worker, and workers that stop in the middle of a chunk.

Most tests take the loop and the runner step by step in this process; two run a real
cluster: a job calling ``sys.exit`` and a worker killed with SIGKILL mid-chunk.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from django_ratequeue import JobFailed, Status, enqueue, enqueue_many
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Attempt, Job
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def labels_run(path: Path) -> Counter[str]:
    return Counter(line.split()[0] for line in lines(path))


def age_dispatches() -> None:
    """As if WORKER_DEAD_AFTER had passed since the attempts were dispatched."""
    past = timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER + 1)
    Attempt.objects.update(dispatched_at=F("dispatched_at") - past)


def tries(handle: Any) -> int:
    return Job.objects.get(pk=handle.id).attempts


@pytest.fixture
def idle_worker() -> str:
    """A live worker (this process) that runs nothing: it would have claimed any task."""
    return beat(force=True)


@pytest.fixture
def roomy(settings: Any) -> None:
    """Room for every job of a test to start in one step, in one batch."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 20}


# -- dispatched, never claimed -------------------------------------------------------------


@pytest.mark.django_db
def test_an_attempt_no_runner_claimed_waits_again(tmp_path: Path, idle_worker: str) -> None:
    log = tmp_path / "runs.log"
    handle = enqueue(jobs.record, args=[str(log), "once"])
    leading_loop().step()  # dispatches; no runner comes (its signal was lost)
    leading_loop().run(30)  # the loop a moment later: a runner may still claim it
    assert handle.status() == Status.RUNNING and not lines(log)

    age_dispatches()
    run_pass()  # takes it back, starts the job again and runs it
    run_pass()  # takes in the outcome
    assert handle.status() == Status.COMPLETE
    assert [a.outcome for a in handle.attempts()] == ["succeeded"]
    assert tries(handle) == 1 and labels_run(log) == {"once": 1}


@pytest.mark.django_db
def test_while_every_worker_is_busy_an_unclaimed_attempt_waits_for_one(
    tmp_path: Path, roomy: None
) -> None:
    log = tmp_path / "runs.log"
    busy, queued = enqueue_many(jobs.record, [[str(log), "busy"], [str(log), "queued"]])
    loop = leading_loop()
    loop.step()
    worker = beat(force=True)
    Runner(worker).claim()  # the first job, which runs long
    running = Attempt.objects.get(job_id=busy.id, worker=worker)
    Attempt.objects.filter(pk=running.pk).update(started_at=timezone.now())  # a long job
    age_dispatches()
    leading_loop().step()
    (attempt,) = queued.attempts()
    assert attempt.ended_at is None and tries(queued) == 1  # waits for a runner, as is


# -- jobs that try to end their worker -----------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("func", "error"),
    [(jobs.exit_worker, "SystemExit: 3"), (jobs.interrupt, "KeyboardInterrupt")],
)
def test_a_job_that_exits_fails_alone_and_its_batch_runs_on(
    tmp_path: Path, roomy: None, func: Any, error: str
) -> None:
    log = tmp_path / "runs.log"
    before = enqueue_many(jobs.record, [[str(log), f"b{i}"] for i in range(4)])
    exiting = enqueue(func, retries=0)
    after = enqueue_many(jobs.record, [[str(log), f"a{i}"] for i in range(7)])
    loop = leading_loop()
    loop.step()
    assert Attempt.objects.filter(active=True).count() == 12
    Runner("a-worker").drain()  # raises nothing
    loop.step()
    with pytest.raises(JobFailed, match=rf"{error} \(a job cannot stop its worker"):
        exiting.result(timeout=0)
    for handle in [*before, *after]:
        assert handle.status() == Status.COMPLETE and tries(handle) == 1
    assert set(labels_run(log).values()) == {1} and len(labels_run(log)) == 11


def test_a_job_that_exits_does_not_take_its_worker_or_batch_with_it(
    cluster: Any, tmp_path: Path
) -> None:
    cluster(workers=1, MAX_CONCURRENCY=20)
    log = tmp_path / "runs.log"
    with transaction.atomic():  # one commit: the twelve are dealt behind the exit
        exiting = enqueue(jobs.exit_worker, args=[3], retries=0)
        others = enqueue_many(jobs.record, [[str(log), f"t{i}"] for i in range(12)])
    with pytest.raises(JobFailed, match="SystemExit: 3"):
        exiting.result(timeout=30)
    assert [h.result(timeout=30) for h in others] == [f"t{i}" for i in range(12)]
    assert set(labels_run(log).values()) == {1}
    assert len({line.split()[2] for line in lines(log)}) == 1  # the same worker ran them all
    assert not Attempt.objects.filter(outcome="worker_lost").exists()
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}


# -- what stops a process, and a worker killed with jobs in its slots ---------------------


@pytest.mark.django_db
def test_what_stops_a_process_fails_its_job_alone(roomy: None, tmp_path: Path) -> None:
    """A ``BaseException`` that is not the job's ``SystemExit`` or ``KeyboardInterrupt``
    (what stops a process from outside) raised in a slot fails that attempt, and the
    runner goes on with the others."""
    log = tmp_path / "runs.log"
    stopper = enqueue(jobs.stop_process, retries=0)
    rest = enqueue_many(jobs.record, [[str(log), "n0"], [str(log), "n1"]])
    leading_loop().step()
    Runner("a-worker").drain()
    run_pass()
    with pytest.raises(JobFailed, match=r"ProcessStopping: the process is going"):
        stopper.result(timeout=0)
    for handle in rest:
        assert handle.status() == Status.COMPLETE and tries(handle) == 1
    assert labels_run(log) == {"n0": 1, "n1": 1}


def test_a_worker_killed_with_jobs_in_its_slots_reruns_only_those(
    cluster: Any, tmp_path: Path
) -> None:
    """kill -9 of a process with 20 jobs in its slots: the 20 are recovered and run again,
    none is lost, none runs twice at once; the 10 that waited, and those that ended
    before the kill, run once."""
    cluster(workers=1, SLOTS=20, MAX_CONCURRENCY=40, WORKER_DEAD_AFTER=1.5)
    log, release = tmp_path / "runs.log", tmp_path / "release"
    quick = enqueue_many(jobs.record, [[str(log), f"q{i}"] for i in range(5)])
    assert [h.result(timeout=60) for h in quick] == [f"q{i}" for i in range(5)]
    params = [[str(log), f"j{i:02d}", str(release)] for i in range(30)]
    handles = enqueue_many(jobs.record_then_block, params)
    wait_for(lambda: len([ln for ln in lines(log) if ln.startswith("j")]) >= 20, 60, "20 in slots")
    (pid,) = {line.split()[2] for line in lines(log) if line.startswith("j")}
    in_flight = {line.split()[0] for line in lines(log) if line.startswith("j")}
    assert len(in_flight) == 20
    os.kill(int(pid), signal.SIGKILL)
    release.touch()
    assert [h.result(timeout=90) for h in handles] == [f"j{i:02d}" for i in range(30)]
    runs = labels_run(log)
    for i, handle in enumerate(handles):
        label = f"j{i:02d}"
        if label in in_flight:
            assert [a.outcome for a in handle.attempts()] == ["worker_lost", "succeeded"]
            assert runs[label] == 2
        else:
            assert [a.outcome for a in handle.attempts()] == ["succeeded"] and runs[label] == 1
    assert all(runs[f"q{i}"] == 1 for i in range(5))

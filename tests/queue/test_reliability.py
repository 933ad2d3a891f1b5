"""Failures of the machinery itself: killed workers, a killed loop, racing loops, limits
under load, and a thousand jobs with none lost and none run twice."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from contextlib import suppress
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_ratequeue import Status, enqueue, enqueue_many
from django_ratequeue.engine.agent import take_lapsed_lease
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import LoopStatus
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Attempt, Job, LoopState
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass
from tests.threads import run_in_threads


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_killed_worker_attempt_is_recovered_and_retried(cluster, tmp_path: Path) -> None:
    cluster(workers=2, WORKER_DEAD_AFTER=1.5)
    started, release = tmp_path / "started.log", tmp_path / "release"
    handle = enqueue(jobs.block_until_file, args=[str(started), str(release)], retries=2)
    first = wait_for(lambda: lines(started), message="the job to start")
    os.kill(int(first[0].split()[2]), signal.SIGKILL)
    release.touch()
    assert handle.result(timeout=30) == "released"
    assert [a.outcome for a in handle.attempts()] == ["worker_lost", "succeeded"]
    pids = [line.split()[2] for line in lines(started)]
    assert len(pids) == 2 and pids[0] != pids[1]


def test_a_leader_that_stopped_renewing_its_lease_is_replaced(cluster) -> None:
    cluster()
    enqueue(jobs.add, args=[1, 1]).result(timeout=30)
    # As if a process that took the lease had died: a generation nobody renews, lapsed.
    generation = LoopState.objects.ensure().generation + 1
    LoopState.objects.filter(pk=1).update(
        generation=generation,
        state=LoopStatus.RUNNING,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    handle = enqueue(jobs.add, args=[2, 2])
    assert handle.result(timeout=30) == 4
    assert LoopState.objects.ensure().generation > generation


def test_killed_cluster_leaves_nothing_behind(cluster, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    first = cluster(workers=2, MAX_CONCURRENCY=4, WORKER_DEAD_AFTER=1.5)
    handles = enqueue_many(jobs.sleep_and_record, [[str(log), f"j{i}", 0.05] for i in range(40)])
    wait_for(lambda: len(lines(log)) >= 5, message="some jobs to run")
    first.kill()  # workers, and the loop's pass among them
    cluster(workers=2, MAX_CONCURRENCY=4, WORKER_DEAD_AFTER=1.5)
    wait_for(
        lambda: Job.objects.filter(status=Status.COMPLETE).count() == 40,
        timeout=90,
        message="every job to complete after the restart",
    )
    runs = Counter(line.split()[0] for line in lines(log))
    assert set(runs) == {f"j{i}" for i in range(40)}
    # A job runs again only if its attempt was cut short by the kill.
    lost = {
        args[1]
        for args in Attempt.objects.filter(outcome="worker_lost").values_list(
            "job__args", flat=True
        )
    }
    assert {label for label, count in runs.items() if count > 1} <= lost
    assert len(handles) == 40


def postgres_client_ports(pid: int) -> set[int]:
    """The local ports of process ``pid``'s TCP connections to the database server."""
    server_port = int(connection.settings_dict["PORT"] or 5432)
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                sockets.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in sockets and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.postgres_only
def test_a_runner_reports_its_outcome_through_a_lost_connection(cluster, tmp_path: Path) -> None:
    """As in a database restart, the worker's connections are cut while its job runs: the
    outcome is still written, on a new connection, and the job does not run again."""
    cluster(workers=1)
    started, release = tmp_path / "started", tmp_path / "release"
    handle = enqueue(jobs.block_until_file, args=[str(started), str(release)])
    (line,) = wait_for(lambda: lines(started), message="the job to start")
    ports = postgres_client_ports(int(line.split()[2]))
    assert ports, "the worker talks to PostgreSQL over TCP"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE client_port = ANY(%s)",
            [sorted(ports)],
        )
        assert cursor.fetchone()[0] >= 1
    release.touch()
    assert handle.result(timeout=30) == "released"
    assert [attempt.outcome for attempt in handle.attempts()] == ["succeeded"]
    assert len(lines(started)) == 1


def test_two_processes_racing_for_a_lapsed_lease_exactly_one_leads(transactional_db) -> None:
    enqueue(jobs.add, args=[1, 2])
    generation = LoopState.objects.ensure().generation
    barrier = threading.Barrier(2)
    outcomes: list[bool] = []

    def contender() -> None:
        barrier.wait()
        loop = take_lapsed_lease()
        if loop is not None:
            loop.run(30)
        outcomes.append(loop is not None)

    run_in_threads(contender, 2)
    assert sorted(outcomes) == [False, True]
    assert LoopState.objects.ensure().generation == generation + 1
    assert Attempt.objects.count() == 1  # the job was started once, by the winner


def test_concurrency_limits_hold_under_load(cluster, tmp_path: Path) -> None:
    cluster(
        workers=4,
        MAX_CONCURRENCY=3,
        QUEUES={
            "narrow": {"max_concurrency": 1},
            "keyed": {"max_concurrency": 1, "total_concurrency": 2},
        },
    )
    counter = str(tmp_path / "counter.json")
    handles = enqueue_many(jobs.observed, [[counter, ["all"], 0.05]] * 12)
    handles += enqueue_many(
        jobs.observed, [[counter, ["all", "narrow"], 0.05]] * 6, queue="narrow"
    )
    for key in ("k1", "k2"):
        handles += enqueue_many(
            jobs.observed,
            [[counter, ["all", "keyed", key], 0.05]] * 4,
            queue="keyed",
            concurrency_key=key,
        )
    for handle in handles:
        handle.result(timeout=60)
    peak = json.loads(Path(counter).read_text())["peak"]
    assert peak["all"] <= 3 and peak["narrow"] == 1 and peak["k1"] == peak["k2"] == 1
    assert 1 <= peak["keyed"] <= 2 and peak["all"] >= 2


def test_a_thousand_jobs_none_lost_none_run_twice(cluster, tmp_path: Path) -> None:
    cluster(workers=2, MAX_CONCURRENCY=50)
    log = tmp_path / "runs.log"
    enqueue_many(jobs.record, [[str(log), f"j{i}"] for i in range(1000)])
    wait_for(
        lambda: Job.objects.filter(status=Status.COMPLETE).count() == 1000,
        timeout=120,
        message="1,000 jobs to complete",
    )
    runs = Counter(line.split()[0] for line in lines(log))
    assert len(runs) == 1000 and set(runs.values()) == {1}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}


@pytest.mark.django_db
def test_an_attempt_that_ran_is_never_claimed_again(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    handle = enqueue(jobs.record, args=[str(log), "once"])
    run_pass()  # starts the job and runs it
    assert Runner("another-worker").drain() == 0  # more runners look: nothing to claim
    assert Runner(beat()).drain() == 0
    run_pass()  # takes the outcome into account
    assert lines(log)[0].startswith("once") and len(lines(log)) == 1
    assert handle.status() == Status.COMPLETE


@pytest.mark.django_db
def test_a_job_canceled_after_dispatch_but_before_start_never_runs(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    handle = enqueue(jobs.record, args=[str(log), "never"])
    loop = leading_loop()
    loop.step()  # dispatches the job; its batch is not run yet
    assert handle.status() == Status.RUNNING
    handle.cancel()
    loop.step()  # applies the cancel: the attempt that never started is ended
    loop.step()  # and its job finished
    assert Runner("a-worker").drain() == 0  # a runner looks late: nothing to claim
    assert handle.status() == Status.CANCELED and not lines(log)
    # The attempt stays in the job's timeline, ended without having started.
    (attempt,) = handle.attempts()
    assert attempt.number == 1 and attempt.started_at is None and attempt.ended_at
    assert attempt.error == "Canceled before it started."
    assert Job.objects.get(pk=handle.id).attempts == 1


@pytest.mark.django_db
def test_a_cancel_wins_over_an_end_the_loop_has_not_taken_in_yet(tmp_path: Path) -> None:
    """The attempt ended, then the job was canceled, before the loop's next step: the job
    ends CANCELED (it ran, but the caller canceled it before its end was taken in)."""
    log = tmp_path / "runs.log"
    handle = enqueue(jobs.record, args=[str(log), "ran"])
    loop = leading_loop()
    loop.step()  # dispatches the job
    Runner("a-worker").drain()  # runs and reports it, nothing more
    handle.cancel()
    loop.step()
    assert lines(log) and handle.status() == Status.CANCELED

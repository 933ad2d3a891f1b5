"""The fault drill of ``bench.faults``, in its light form: while a steady load runs over
three queues with concurrency limits, every connection to the test database is
terminated, then the loop's process and a worker are killed (``kill -9``). No job is lost,
none runs twice at once, no limit is exceeded, and each fault is recovered from.

The full drill (``python -m bench.faults``) restarts a PostgreSQL server of its own and
adds poison jobs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections, transaction

from bench.faults import SETTINGS, Drill, KillLoop, KillWorker, TerminateConnections, plan
from django_ratequeue import Status, enqueue, enqueue_many
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.loop import Loop
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Job, LoopState
from tests.cluster import child_pids, wait_for
from tests.queue import jobs


@pytest.mark.postgres_only
def test_fault_drill_loses_nothing_runs_nothing_twice_and_keeps_the_limits(
    cluster, tmp_path: Path
) -> None:
    running = cluster(workers=5, WORKER_DEAD_AFTER=3.0, **SETTINGS)
    drill = Drill(
        tmp_path / "runs.log",
        plan(300),
        rate=25,
        cluster_pids=lambda: child_pids(running.process.pid),
        pause=1.0,
        recovery_limit=60,
        stall_limit=30,
        confirm_after=5,  # past the fixture's LOOP_LEASE of 2 s
    )
    report = drill.run([TerminateConnections(), KillLoop(), KillWorker()])
    details = "\n".join([report.table(), *report.details()])
    assert drill.producer.error is None, details
    assert [hit.recovered_at is not None for hit in report.hits] == [True] * 3, details
    assert report.lost == {}, details
    assert report.findings.twice == {}, details
    assert report.findings.exceeded == [], details
    assert report.findings.peaks["all"] >= 2, details  # the observer saw jobs side by side


@pytest.mark.postgres_only
def test_an_enqueue_never_waits_for_the_loops_row(transactional_db: None) -> None:
    """The drill's producer once died of a kick that touched the loop's row after the
    job's commit. Producers do not touch it at all now: a held lock on it (a step, a
    takeover) cannot fail or slow down an enqueue."""
    LoopState.objects.ensure()
    locked, release = threading.Event(), threading.Event()

    def hold_the_loop_row() -> None:
        try:
            with transaction.atomic():
                LoopState.objects.select_for_update().get(pk=LoopState.SINGLETON)
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_loop_row)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 200")  # waiting on the row would fail
        try:
            handle = enqueue(jobs.add, args=[1, 1])
            handles = enqueue_many(jobs.add, [[2, 2]])
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET statement_timeout = 0")
    finally:
        release.set()
        holder.join(timeout=30)
    assert Job.objects.filter(pk__in=[handle.id, handles[0].id]).count() == 2


@pytest.mark.postgres_only
def test_a_runner_whose_connection_was_cut_while_it_waited_still_runs(
    transactional_db: None, tmp_path: Path, settings: Any
) -> None:
    """The drill's terminated connections left attempts dispatched and never claimed, all
    slots held for good: a runner's connection, cut while it waited, failed the first
    statement of its next turn. Its turns go on through the reconnect."""
    log = tmp_path / "runs.log"
    generation = LoopState.objects.ensure().generation + 1
    LoopState.objects.update(generation=generation)
    loop = Loop(generation)
    runner = Runner(beat(force=True))
    stopping = threading.Event()

    def serve() -> None:
        try:
            runner.serve(stopping, 5.0)
        finally:
            connections.close_all()

    serving = threading.Thread(target=serve)
    serving.start()
    try:
        # The runner's connections (its own, its listener's) open as it first looks.
        wait_for(lambda: others("SELECT count(*)") >= 2, 30, "the runner to wait")
        others("SELECT count(pg_terminate_backend(pid))")
        handle = enqueue(jobs.record, args=[str(log), "once"])
        loop.step()  # starts the job: WORK
        wait_for(lambda: log.exists(), 30, "the job to run")
    finally:
        runner.stop(stopping)
        serving.join(timeout=30)
        runner.close()
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["once"]
    wait_for(lambda: [loop.step(), handle.status()][1] == Status.COMPLETE, 30, "its end")


def others(select: str) -> int:
    """``select`` over the other sessions on this database (the runner thread's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"{select} FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (count,) = cursor.fetchone()
    return int(count)

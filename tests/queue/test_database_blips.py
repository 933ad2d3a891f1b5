"""A running job's calls into the engine survive a database blip (issue 36): its first
``stream_output()`` (which reads the job's earlier output), ``report_progress()``, the
wait on a subtask and the read of its result retry on a new connection when the one
they had was cut (a database restart, an administrator, a server out of connections),
and the job completes."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from django_ratequeue import Status, enqueue
from tests.cluster import wait_for
from tests.queue import blip_jobs
from tests.queue.test_reliability import lines, postgres_client_ports


def cut_connections(pid: int) -> int:
    """Terminate the database sessions of process ``pid``; return how many there were."""
    ports = postgres_client_ports(pid)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE client_port = ANY(%s)",
            [sorted(ports)],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.postgres_only
def test_a_job_streams_and_waits_on_its_subtask_through_cut_connections(
    cluster, tmp_path: Path
) -> None:
    cluster(workers=1)
    log, release = tmp_path / "started", tmp_path / "release"
    child_log, child_release = tmp_path / "child", tmp_path / "child-release"
    handles = [
        enqueue(
            blip_jobs.talk_through_blips,
            args=[str(log), str(release), str(child_log) + str(n), str(child_release)],
            retries=0,  # a blip must not fail the attempt: there is no other
        )
        for n in range(3)
    ]
    started = wait_for(lambda: len(lines(log)) == 3 and lines(log), message="the jobs to start")
    worker = int(started[0].split()[2])
    assert cut_connections(worker) >= 3  # each job's own, the runner's
    release.touch()  # they stream, report progress and enqueue their subtasks
    children = [Path(str(child_log) + str(n)) for n in range(3)]
    wait_for(lambda: all(lines(path) for path in children), 60, "the subtasks to start")
    assert cut_connections(worker) >= 3  # the parents wait on their subtasks
    child_release.touch()
    for handle in handles:
        assert handle.result(timeout=90) == "released after release"
        assert handle.status() == Status.COMPLETE
        assert [attempt.outcome for attempt in handle.attempts()] == ["succeeded"]
        assert "".join(handle.output()) == "one two three "
        assert handle.progress() == {"done": 3, "total": 3}


def allow_connections(allowed: bool) -> None:
    """Let the test database take new sessions, or not (from the server's own database)."""
    settings = connection.settings_dict
    name = connection.ops.quote_name(settings["NAME"])
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or None,
        dbname="postgres",
        autocommit=True,
    ) as server:
        server.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS {str(allowed).lower()}")


@pytest.mark.postgres_only
def test_a_job_streams_through_a_database_that_refuses_connections(
    cluster, tmp_path: Path
) -> None:
    """As when the server is out of connections: the worker's sessions are cut, and for
    three seconds the database takes no new one (ALLOW_CONNECTIONS false, which holds for
    every role; this test's own session stays). The jobs' calls wait, and they complete."""
    cluster(workers=1)
    log, release = tmp_path / "started", tmp_path / "release"
    child_log, child_release = tmp_path / "child", tmp_path / "child-release"
    child_release.touch()  # the subtasks end at once: this test is about the streaming
    handles = [
        enqueue(
            blip_jobs.talk_through_blips,
            args=[str(log), str(release), str(child_log) + str(n), str(child_release)],
            retries=0,
        )
        for n in range(2)
    ]
    started = wait_for(lambda: len(lines(log)) == 2 and lines(log), message="the jobs to start")
    allow_connections(False)
    try:
        assert cut_connections(int(started[0].split()[2])) >= 2
        release.touch()  # their first stream_output() finds no connection, and none to make
        time.sleep(3)
    finally:
        allow_connections(True)
    for handle in handles:
        assert handle.result(timeout=90) == "released after release"
        assert [attempt.outcome for attempt in handle.attempts()] == ["succeeded"]
        assert "".join(handle.output()) == "one two three "

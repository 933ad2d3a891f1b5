"""The fault drill of ``bench.faults``, in its light form: while a steady load runs over
three queues with concurrency limits, every connection to the test database is
terminated, then the loop's process and a worker are killed (``kill -9``). No job is lost,
none runs twice at once, no limit is exceeded, and each fault is recovered from.

The full drill (``python -m bench.faults``) restarts a PostgreSQL server of its own and
adds poison jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults import SETTINGS, Drill, KillLoop, KillWorker, TerminateConnections, plan
from tests.queue.conftest import child_pids


@pytest.mark.cluster
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
    )
    report = drill.run([TerminateConnections(), KillLoop(as_task=True), KillWorker()])
    details = "\n".join([report.table(), *report.details()])
    assert drill.producer.error is None, details
    assert [hit.recovered_at is not None for hit in report.hits] == [True] * 3, details
    assert report.lost == {}, details
    assert report.findings.twice == {}, details
    assert report.findings.exceeded == [], details
    assert report.findings.peaks["all"] >= 2, details  # the observer saw jobs side by side

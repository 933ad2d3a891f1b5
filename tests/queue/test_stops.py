"""A cluster stopped with jobs in its slots, and one restarted after a crash, on real
clusters: a stop finishes or hands back what ran, and a restart takes its dead
predecessors' work over at once, not ``WORKER_DEAD_AFTER`` later."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from django_ratequeue import Status, enqueue_many
from django_ratequeue.models import Attempt
from tests.cluster import wait_for
from tests.queue import jobs


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_stopped_cluster_hands_back_the_jobs_still_in_its_slots(
    cluster: Any, tmp_path: Path
) -> None:
    """SIGTERM to the main qcluster process: it exits (no runner holds its worker), and
    the two jobs that did not end within STOP_GRACE wait again, not counted as tries."""
    started, release = tmp_path / "started.log", tmp_path / "release"
    first = cluster(workers=1, SLOTS=4, STOP_GRACE=0.5)
    handles = enqueue_many(jobs.block_until_file, [[str(started), str(release), 120]] * 2)
    wait_for(lambda: len(lines(started)) == 2, 60, "both jobs in the slots")
    first.process.send_signal(signal.SIGTERM)
    wait_for(lambda: first.process.poll() is not None, 60, "the cluster to stop")
    assert all(h.status() == Status.RUNNING for h in handles)
    assert (
        list(Attempt.objects.values_list("worker", "started_at", "ended_at"))
        == [("", None, None)] * 2
    )
    release.touch()
    cluster(workers=1)
    assert [h.result(timeout=60) for h in handles] == ["released"] * 2
    for handle in handles:
        assert [a.outcome for a in handle.attempts()] == ["succeeded"]


def test_a_cluster_restarted_after_a_crash_takes_over_at_once(
    cluster: Any, tmp_path: Path
) -> None:
    """kill -9 of the whole cluster, then a new one on the same host: the dead workers'
    attempts are taken back as soon as the new workers see their processes gone; with
    WORKER_DEAD_AFTER at 120 s, waiting for it would outlast the result's timeout."""
    started, release = tmp_path / "started.log", tmp_path / "release"
    crashed = cluster(workers=1, WORKER_DEAD_AFTER=120.0)
    (handle,) = enqueue_many(jobs.block_until_file, [[str(started), str(release), 120]])
    wait_for(lambda: len(lines(started)) == 1, 60, "the job to start")
    crashed.kill()
    release.touch()
    cluster(workers=1, WORKER_DEAD_AFTER=120.0)
    assert handle.result(timeout=60) == "released"
    assert [a.outcome for a in handle.attempts()] == ["worker_lost", "succeeded"]

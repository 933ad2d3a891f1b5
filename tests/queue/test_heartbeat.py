"""A worker process's id, one for all its threads, and a restarted host's takeover of its
gone predecessors (engine/heartbeat.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from datetime import timedelta
from typing import Any

import pytest

from django_ratequeue import clock
from django_ratequeue.engine import heartbeat
from django_ratequeue.engine.heartbeat import beat, take_over_gone_here, worker_id
from django_ratequeue.models import WorkerHeartbeat


def test_the_threads_of_a_process_share_one_worker_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent and the runner start together: they must beat as one worker."""
    monkeypatch.setattr(heartbeat, "_identity", None)
    start = threading.Barrier(8)
    ids: list[str] = []

    def take() -> None:
        start.wait()
        ids.append(worker_id())

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1 and ids[0] == worker_id()


@pytest.mark.django_db
def test_a_new_process_takes_over_the_workers_of_its_host_that_are_gone(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "HEARTBEAT_INTERVAL": 1.0}
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid runs nothing now
    alive = os.getppid()  # started long before its heartbeat below
    late = clock.now() - timedelta(seconds=3)
    here = socket.gethostname()
    rows = {
        "gone": (gone.pid, here, late),
        "alive but late": (alive, here, late),
        "elsewhere": (gone.pid, "another-host", late),
        "on time": (gone.pid, here, clock.now()),
    }
    for name, (pid, host, seen_at) in rows.items():
        WorkerHeartbeat.objects.create(id=name, pid=pid, host=host, seen_at=seen_at)
    beat(force=True)
    assert take_over_gone_here() == 1
    dead_after = timedelta(seconds=settings.RATEQUEUE.get("WORKER_DEAD_AFTER", 10.0))
    dead = WorkerHeartbeat.objects.filter(seen_at__lt=clock.now() - dead_after)
    assert list(dead.values_list("id", flat=True)) == ["gone"]
    assert take_over_gone_here() == 0

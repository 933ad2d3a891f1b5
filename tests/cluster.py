"""Real qcluster processes for the tests, and the helpers that wait on them.

The root conftest's ``cluster`` fixture starts clusters with :func:`launch`; any test
that uses it is marked ``cluster`` automatically (``-m "not cluster"`` skips them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection

from django_ratequeue.models import WorkerHeartbeat

ROOT = Path(__file__).resolve().parents[1]
FAST_TIMINGS = {
    "LOOP_LEASE": 2.0,
    "WATCHDOG_INTERVAL": 0.1,
    "HEARTBEAT_INTERVAL": 0.2,
    # Long enough that a live worker on a loaded CI machine is never taken for dead; the
    # tests about dead workers shorten it.
    "WORKER_DEAD_AFTER": 5.0,
    "SEGMENT": 0.02,
}


def wait_for(condition: Callable[[], Any], timeout: float = 30, message: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or condition}")
        time.sleep(0.02)


def database_url() -> str:
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings["USER"] or ""
    host = settings["HOST"] or "127.0.0.1"
    port = settings["PORT"] or "5432"
    return f"postgres://{user}@{host}:{port}/{settings['NAME']}"


@dataclass
class Cluster:
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL the whole process group: cluster, workers, pusher, monitor."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def pids(self) -> list[int]:
        """The pids of the cluster's processes (its workers among them)."""
        return child_pids(self.process.pid)

    def wait_for_workers(self, workers: int) -> None:
        """Return once ``workers`` of its workers' watchdogs have reported."""
        since = time.time()

        def reported() -> bool:
            # Listing the cluster's processes runs ps: only once enough heartbeats are in.
            seen = set(WorkerHeartbeat.objects.values_list("pid", flat=True))
            return len(seen) >= workers and len(seen.intersection(self.pids())) >= workers

        wait_for(
            lambda: self.process.poll() is not None or reported(),
            timeout=60,
            message=f"{workers} qcluster workers to report (since {since})",
        )
        assert self.process.poll() is None, self.output()


def launch(options: dict[str, Any], workers: int, log: Path) -> Cluster:
    """Start ``manage.py qcluster`` with ``workers`` workers and the RATEQUEUE ``options`` on
    the test database, in its own process group, its output in ``log``."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.queue.cluster_settings",
        "RATEQUEUE_OVERRIDES": json.dumps(options),
        "Q_WORKERS": str(workers),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Cluster(process, log)


def child_pids(pid: int) -> list[int]:
    """The pids of the processes in ``pid``'s process group."""
    result = subprocess.run(
        ["ps", "-o", "pid=", "-g", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in result.stdout.split()]

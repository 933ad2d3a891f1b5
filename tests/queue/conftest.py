"""Real qcluster processes for the queue tests.

``cluster(workers=2, **RATEQUEUE overrides)`` starts ``manage.py qcluster`` on the test
database in its own process group, waits until every worker's watchdog has reported, and
kills the whole group at teardown. The test process uses the same overrides.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_ratequeue.models import WorkerHeartbeat

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture
def cluster(
    transactional_db: None, settings: Any, tmp_path: Path
) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []
    base = dict(settings.RATEQUEUE)

    def start(workers: int = 2, wait: bool = True, **overrides: Any) -> Cluster:
        options = {**FAST_TIMINGS, **overrides}
        settings.RATEQUEUE = {**base, **options}
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.queue.cluster_settings",
            "RATEQUEUE_OVERRIDES": json.dumps(options),
            "Q_WORKERS": str(workers),
        }
        log = tmp_path / f"qcluster-{len(started)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        running = Cluster(process, log)
        started.append(running)
        if wait:
            since = time.time()
            wait_for(
                lambda: (
                    process.poll() is not None
                    or WorkerHeartbeat.objects.filter(pid__in=child_pids(process.pid)).count()
                    >= workers
                ),
                timeout=60,
                message=f"{workers} qcluster workers to report (since {since})",
            )
            assert process.poll() is None, running.output()
        return running

    yield start
    for running in started:
        running.kill()


def child_pids(pid: int) -> list[int]:
    """The pids of the processes in ``pid``'s process group."""
    result = subprocess.run(
        ["ps", "-o", "pid=", "-g", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in result.stdout.split()]

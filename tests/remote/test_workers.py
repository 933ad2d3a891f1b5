"""Remote worker processes (``python -m django_ratequeue.worker``) against a real server
process and a real cluster: work shared and never run twice, a killed worker's attempt
taken over once its lease lapses, a stopped worker's attempt handed back at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_ratequeue import enqueue, enqueue_many
from django_ratequeue.queue.models import Attempt, Job, Outcome, Status
from django_ratequeue.queue.workerkeys import create_key
from tests.cluster import FAST_TIMINGS, ROOT, Cluster, database_url, wait_for

from .conftest import REMOTE_QUEUES

OPTIONS = {"QUEUES": REMOTE_QUEUES, "REMOTE_LEASE": 1.0}


@dataclass
class Remote:
    """A server process, and remote worker processes started against it."""

    url: str
    port: int
    key: str
    options: dict[str, Any]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]]

    def serve(self) -> subprocess.Popen[bytes]:
        """Start the server (runserver) on the test database; return once it answers."""
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.queue.cluster_settings",
            "RATEQUEUE_OVERRIDES": json.dumps({**FAST_TIMINGS, **self.options}),
        }
        log = self.log_dir / f"server-{len(self.processes)}.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(server)
        wait_for(
            lambda: answers(f"{self.url}workers/claim/") or server.poll() is not None, 60, "server"
        )
        assert server.poll() is None, log.read_text()
        return server

    def worker(self, concurrency: int = 2, grace: float = 5.0) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"worker-{len(self.processes)}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django_ratequeue.worker",
                *("--url", self.url, "--key", self.key, "--handlers", "tests.remote.handlers"),
                *("--concurrency", str(concurrency), "--grace", str(grace)),
            ],
            cwd=ROOT,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},  # no Django settings
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=1)
    except urllib.error.HTTPError:
        return True  # 401: up
    except OSError:
        return False
    return True


@pytest.fixture
def start_remote(
    cluster: Callable[..., Cluster], tmp_path: Path
) -> Iterator[Callable[..., Remote]]:
    """``start_remote(REMOTE_LEASE=...)``: a cluster and a server process with remote
    queues, and a key for them; its processes are killed at teardown."""
    started: list[Remote] = []

    def start(**overrides: Any) -> Remote:
        options = {**OPTIONS, **overrides}
        cluster(workers=1, **options)
        port = free_port()
        key = create_key("test workers", ["gpu"])[1]
        running = Remote(f"http://127.0.0.1:{port}/ratequeue/", port, key, options, tmp_path, [])
        started.append(running)
        running.serve()
        return running

    yield start
    for running in started:
        for process in running.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@pytest.fixture
def remote(start_remote: Callable[..., Remote]) -> Remote:
    return start_remote()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_two_workers_share_the_work_none_lost_none_twice(remote: Remote, tmp_path: Path) -> None:
    first, second = remote.worker(), remote.worker()
    out = tmp_path / "ran.txt"
    count = 100
    enqueue_many(
        "tests.queue.jobs.record", [[str(out), str(n)] for n in range(count)], queue="gpu"
    )
    wait_for(lambda: Job.objects.filter(status=Status.COMPLETE).count() == count, 90, "all jobs")
    ran = [line.split() for line in lines(out)]
    assert Counter(label for label, _pid in ran) == Counter(str(n) for n in range(count))
    assert {int(pid) for _label, pid in ran} == {first.pid, second.pid}
    # Any other attempt is one whose claim's answer was lost: ended unstarted or lost.
    others = Attempt.objects.exclude(outcome=Outcome.SUCCEEDED)
    assert set(others.values_list("outcome", flat=True)) <= {"", Outcome.WORKER_LOST}


def test_a_killed_worker_s_attempt_completes_on_another(remote: Remote, tmp_path: Path) -> None:
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    doomed = remote.worker(concurrency=1)
    handle = enqueue(
        "tests.queue.jobs.block_until_file", args=[str(out), str(marker)], queue="gpu"
    )
    wait_for(lambda: f"start {doomed.pid}" in lines(out), 30, "the first worker to start it")
    survivor = remote.worker(concurrency=1)
    os.kill(doomed.pid, signal.SIGKILL)
    wait_for(lambda: f"start {survivor.pid}" in lines(out), 30, "the other worker to take over")
    marker.touch()
    assert handle.result(timeout=30) == "released"
    outcomes = list(Attempt.objects.filter(job_id=handle.id).order_by("number"))
    assert [a.outcome for a in outcomes] == [Outcome.WORKER_LOST, Outcome.SUCCEEDED]


def test_a_stopped_worker_hands_its_attempt_back(remote: Remote, tmp_path: Path) -> None:
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    stopping = remote.worker(concurrency=1, grace=0.2)
    handle = enqueue(
        "tests.queue.jobs.block_until_file", args=[str(out), str(marker)], queue="gpu"
    )
    wait_for(lambda: f"start {stopping.pid}" in lines(out), 30, "the first worker to start it")
    taker = remote.worker(concurrency=1)
    stopping.send_signal(signal.SIGTERM)
    assert stopping.wait(timeout=30) == 0
    wait_for(lambda: f"start {taker.pid}" in lines(out), 30, "the other worker to claim it")
    marker.touch()
    assert handle.result(timeout=30) == "released"
    # Handed back, it was not a try: one attempt, which succeeded.
    assert [a.outcome for a in Attempt.objects.filter(job_id=handle.id)] == [Outcome.SUCCEEDED]


def test_the_worker_program_needs_no_django() -> None:
    code = "import sys; sys.modules['django'] = None; import tests.remote.handlers"
    subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)}
    )


def test_workers_outlive_a_server_restart(
    start_remote: Callable[..., Remote], tmp_path: Path
) -> None:
    """Reports sent while the server is away are sent again, unchanged, once it is back:
    with leases longer than the outage, every job completes, each exactly once. A claim
    whose answer died with the server may leave an attempt that never runs, ended when
    its lease lapses; no job runs twice and none is lost."""
    remote = start_remote(REMOTE_LEASE=30.0)
    remote.worker(), remote.worker()
    out = tmp_path / "ran.txt"
    count = 60
    enqueue_many(
        "tests.queue.jobs.record", [[str(out), str(n)] for n in range(count)], queue="gpu"
    )
    wait_for(lambda: len(lines(out)) >= count // 3, 60, "a third of the jobs to run")
    server = remote.processes[0]
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    assert Job.objects.exclude(status=Status.COMPLETE).exists()  # work was left
    remote.serve()
    wait_for(lambda: Job.objects.filter(status=Status.COMPLETE).count() == count, 90, "all jobs")
    ran = Counter(line.split()[0] for line in lines(out))
    assert ran == Counter(str(n) for n in range(count))
    # Any other attempt is one whose claim's answer was lost: ended unstarted or lost.
    others = Attempt.objects.exclude(outcome=Outcome.SUCCEEDED)
    assert set(others.values_list("outcome", flat=True)) <= {"", Outcome.WORKER_LOST}


def test_a_job_past_its_timeout_fails_at_once(remote: Remote, tmp_path: Path) -> None:
    """The worker stops waiting at the job's timeout and says so: the attempt ends timed
    out then, rather than holding its lease until recovery finds it overran."""
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    remote.worker(concurrency=1)
    handle = enqueue(
        "tests.queue.jobs.block_until_file",
        args=[str(out), str(marker)],
        queue="gpu",
        timeout=1,
    )
    ended = Attempt.objects.filter(job_id=handle.id).exclude(ended_at=None)
    wait_for(ended.exists, 30, "the attempt to end")
    marker.touch()
    attempt = ended.get()
    assert attempt.outcome == Outcome.TIMED_OUT
    assert attempt.error.startswith("The worker stopped waiting"), attempt.error

"""``scripts/demo.sh`` as a new user runs it: it listens on 127.0.0.1, warns that the
example project is not for exposure, and Ctrl-C or SIGTERM to its process group stops the
web server and the django-q2 cluster cleanly (a SIGTERM to the group used to hang in
django-q2's shutdown, its sentinel killed under its main process)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import wait_for

ROOT = Path(__file__).resolve().parents[2]
# The demo starts its own qcluster, not through the `cluster` fixture: mark it by hand.
pytestmark = pytest.mark.cluster


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (the demo and everything it started)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def live_workers(database: Path) -> int:
    try:
        with sqlite3.connect(database) as db:
            return db.execute("SELECT COUNT(*) FROM django_ratequeue_workerheartbeat").fetchone()[
                0
            ]
    except sqlite3.Error:
        return 0


def interruptible() -> None:
    """Start the demo as a terminal would, with SIGINT's default action, even when this
    test run was itself started in the background (which leaves SIGINT ignored, and a
    shell cannot undo that for its children)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, int, Path]]:
    database, log, port = tmp_path / "demo.sqlite3", tmp_path / "demo.log", free_port()
    env = {
        **os.environ,
        "RATEQUEUE_DEMO_PYTHON": sys.executable,
        "DATABASE_URL": f"sqlite:///{database}",
        "PORT": str(port),
        "Q_WORKERS": "1",
    }
    env.pop("RATEQUEUE_DEMO_HOST", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["scripts/demo.sh"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=interruptible,
        )  # fmt: skip
    try:
        wait_for(
            lambda: process.poll() is not None or live_workers(database) >= 1,
            timeout=120,
            message="the demo's cluster to start",
        )
        wait_for(
            lambda: process.poll() is not None or "development server at" in log.read_text(),
            timeout=60,
            message="the demo's web server to start",
        )
        assert process.poll() is None, log.read_text()
        yield process, log, port, database
    finally:
        for pid in session_pids(process.pid):  # only what this test started
            os.kill(pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_stops_everything(demo, signum: int) -> None:
    process, log, port, database = demo
    output = log.read_text()
    assert f"development server at http://127.0.0.1:{port}/" in output  # not 0.0.0.0
    assert "Do not expose it" in output
    with sqlite3.connect(database) as db:
        users = db.execute("SELECT username, is_superuser FROM auth_user ORDER BY username")
        assert users.fetchall() == [("admin", 1), ("alice", 0), ("bob", 0)]

    os.killpg(process.pid, signum)

    wait_for(
        lambda: not session_pids(process.pid),
        timeout=60,
        message="the demo, its web server and its cluster to exit",
    )
    assert "stopping the web server and the django-q2 cluster" in log.read_text()


def command_lines(sid: int) -> list[str]:
    """The command line of every live process of session ``sid``."""
    lines = []
    for pid in session_pids(sid):
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines


def test_the_demo_s_remote_worker_runs_the_remote_queue(demo) -> None:
    """It waits quietly for the web server, started with it, and its key is not in the
    process list."""
    process, log, _port, database = demo
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    code = (
        "from example_project.demo.jobs import on_remote_worker; "
        "print(on_remote_worker.enqueue(3).id)"
    )
    enqueued = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    job_id = enqueued.stdout.strip().splitlines()[-1]

    def result() -> str | None:
        # This job's: the demo's every-minute schedule completes jobs of its own meanwhile.
        with sqlite3.connect(database) as db:
            row = db.execute(
                "SELECT result FROM django_ratequeue_job WHERE id = ? AND status = 'complete'",
                [job_id],
            ).fetchone()
        return row and row[0]

    assert json.loads(wait_for(result, 60, "the remote worker to run the job")).startswith(
        "3² = 9, on "
    )
    output = log.read_text()
    assert "Server away" not in output
    with sqlite3.connect(database) as db:
        [(prefix,)] = db.execute("SELECT prefix FROM django_ratequeue_workerkey").fetchall()
    running = command_lines(process.pid)
    assert any("django_ratequeue.worker" in line for line in running), running
    assert not [line for line in running if f"{prefix}." in line]

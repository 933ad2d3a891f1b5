"""Real web servers for the tests: gunicorn (WSGI, gthread) and uvicorn (ASGI).

Each serves the test settings on the test database, in its own process group, with the
RATEQUEUE overrides a test passes (as the qcluster processes of :mod:`tests.cluster` do).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster import ROOT, database_url, wait_for


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def connection(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def wait_until_up(self) -> None:
        def up() -> bool:
            assert self.process.poll() is None, self.output()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(up, 60, "the web server to listen")


def command(kind: str, port: int, threads: int) -> list[str]:
    """Return the command line of a ``kind`` server ("gunicorn" or "uvicorn")."""
    bind = f"127.0.0.1:{port}"
    if kind == "gunicorn":
        return [
            *(sys.executable, "-m", "gunicorn", "example_project.wsgi:application"),
            *("--worker-class", "gthread", "--workers", "1", "--threads", str(threads)),
            *("--bind", bind, "--timeout", "120", "--log-level", "warning"),
        ]
    return [
        *(sys.executable, "-m", "uvicorn", "example_project.asgi:application"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
    ]


def launch(kind: str, log: Path, threads: int = 4, **overrides: Any) -> Server:
    """Start a ``kind`` server of the test settings with RATEQUEUE ``overrides``."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.queue.cluster_settings",
        "RATEQUEUE_OVERRIDES": json.dumps(overrides),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            command(kind, port, threads),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(process, port, log)
    server.wait_until_up()
    return server

"""docs/quickstart.md followed as written: its commands run in a shell, its files written
where their first line says, then the rate-limited view posted to with its curl recipe (a
POST without the CSRF token is a 403) and its job run by a real ``qcluster``."""

from __future__ import annotations

import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests.cluster import wait_for
from tests.integration.test_demo_script import free_port, session_pids

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "quickstart.md"
# A file block's first line: "# myapp/views.py", or "# mysite/urls.py: add at the end".
FILE_LINE = re.compile(r"# (?P<path>(?:mysite|myapp)/[\w/]+\.py)(?P<append>: add at the end)?$")

# It starts its own runserver and qcluster on a SQLite file of its own: once per Django
# version is enough, on the SQLite leg.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="the quick start's project runs on a SQLite file of its own",
    ),
]


def blocks(language: str) -> list[str]:
    """The guide's fenced code blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)


def block_with(language: str, text: str) -> str:
    [found] = [block for block in blocks(language) if text in block]
    return found


def shell_environment() -> dict[str, str]:
    """A shell whose ``python`` and ``django-admin`` are this virtual environment's, as
    for a user who activated it, and no test settings."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def run(script: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=shell_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def write_files(project: Path) -> None:
    """Write (or add to) the files the guide's Python blocks name."""
    for block in blocks("python"):
        first, _, code = block.partition("\n")
        named = FILE_LINE.match(first)
        if named is None:
            continue
        path = project / named["path"]
        if named["append"]:
            code = path.read_text() + "\n" + code
        path.write_text(code)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The project of steps 1 to 5: created, configured, migrated and checked."""
    created = block_with("bash", "startproject")
    run(created, tmp_path)
    project = tmp_path / "mysite"
    write_files(project)
    output = run(block_with("bash", "manage.py migrate"), project)
    assert "System check identified no issues" in output
    return project


@pytest.fixture
def servers(project: Path) -> Iterator[int]:
    """Step 6's runserver and qcluster, each started as the guide starts it (runserver on
    a free port), until both answer; the port."""
    port = free_port()
    started = []
    for line in block_with("bash", "manage.py runserver").splitlines():
        command = line.partition("#")[0].split()
        if command[-1] == "runserver":
            command.append(f"127.0.0.1:{port}")
        started.append(
            subprocess.Popen(
                command,
                cwd=project,
                env=shell_environment(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    try:
        wait_for(lambda: heartbeats(project / "db.sqlite3") >= 2, 120, "the cluster's workers")
        wait_for(lambda: answers(port), 60, "the web server")
        yield port
    finally:
        for process in started:
            for pid in session_pids(process.pid):  # only what this test started
                os.kill(pid, signal.SIGKILL)
            process.wait(timeout=10)


def heartbeats(database: Path) -> int:
    try:
        with sqlite3.connect(database) as db:
            query = "SELECT COUNT(*) FROM django_ratequeue_workerheartbeat"
            return int(db.execute(query).fetchone()[0])
    except sqlite3.Error:
        return 0


def answers(port: int) -> bool:
    probe = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/admin/login/"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def test_the_quick_start_works_as_written(project: Path, servers: int) -> None:
    url = f"http://127.0.0.1:{servers}"
    # What the guide warns of: a POST without the CSRF token never reaches the limit.
    plain = run(f"curl -s -o /dev/null -w '%{{http_code}}' -X POST {url}/send/", project)
    assert plain == "403"

    curl = block_with("bash", "csrftoken").replace("http://127.0.0.1:8000", url)
    output = run(curl, project)
    assert output.startswith("200 " * 20), output
    assert "HTTP/1.1 429 Too Many Requests" in output
    retry_after = re.search(r"^Retry-After: (\d+)", output, re.M | re.I)
    assert retry_after is not None and 1 <= int(retry_after[1]) <= 6, output

    session = block_with("python", "# python manage.py shell")
    code = session + "\nprint(repr(handle.result(timeout=60)))\n"
    shown = run(f"python manage.py shell -c {shlex.quote(code)}", project)
    assert shown.strip().endswith("'welcome sent to 42'"), shown

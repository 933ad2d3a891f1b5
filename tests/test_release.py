"""The release check: the wheel and the sdist, built and installed in a new virtual
environment, pass a new project's ``check`` and ``migrate`` with the package's templates,
static files and migrations (``scripts/release_check.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Minutes, and the package index (or pip's cache): scripts/test.sh runs it once, as a step
# of its own, and leaves it out of its pytest runs; `-m "not release"` leaves it out here.
pytestmark = pytest.mark.release


def test_the_wheel_and_the_sdist_install_and_migrate(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/release_check.py", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the wheel: check, migrate and makemigrations --check pass" in done.stdout
    assert "the sdist: check, migrate and makemigrations --check pass" in done.stdout

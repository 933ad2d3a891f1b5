"""The documentation site (mkdocs.yml) builds with --strict: every page is in the
navigation, and every link and anchor between pages resolves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip('mkdocs is not installed: pip install "django-ratequeue[docs]"')
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "concepts" / "index.html").exists()
    assert (tmp_path / "search" / "search_index.json").exists()

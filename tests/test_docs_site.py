"""The documentation site (mkdocs.yml) builds with --strict: every page is in the
navigation, and every link and anchor between pages resolves; the package's messages point
into it by page and section."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAV = ROOT / "mkdocs.yml"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None or not find_spec(
        "mkdocstrings_handlers"
    ):
        pytest.skip(
            'mkdocs or mkdocstrings is not installed: pip install "django-ratequeue[docs]"'
        )
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
    reference = (tmp_path / "reference" / "index.html").read_text(encoding="utf-8")
    assert 'id="django_ratequeue.enqueue"' in reference
    assert ":class:`" not in reference and "docs/" not in reference


def test_the_python_reference_has_every_public_name() -> None:
    """docs/reference.md renders the docstring of each name ``django_ratequeue`` exports."""
    import django_ratequeue

    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"^::: django_ratequeue\.(\w+)$", page, re.M))
    assert set(django_ratequeue.__all__) - shown == set()


# A pointer into the documentation, as hints and error messages give it.
PLACE = re.compile(r'see "([^">]+) > ([^">]+)" in the documentation')


def package_strings() -> list[tuple[str, str]]:
    """Return ``(where, text)`` for each string literal of the package but its docstrings."""
    found = []
    for path in sorted((ROOT / "django_ratequeue").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        found += [
            (f"{path.relative_to(ROOT)}:{node.lineno}", node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ]
    return found


def headings(page: Path) -> list[str]:
    """Return the headings of a docs page as the site shows them, numbering dropped."""
    return [
        re.sub(r"^\d+\.\s+", "", line.lstrip("#").strip()).replace("`", "")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("#") and not line.startswith("#!")
    ]


def test_messages_name_a_page_and_section_of_the_site_never_a_repository_path() -> None:
    """A pip user has the docs site, not the repository: hints say "see "Operations >
    SQLite" in the documentation", and that page (its title in the navigation or its own)
    has that section."""
    strings = package_strings()
    assert [where for where, text in strings if re.search(r"docs/|\.md\b", text)] == []
    pages: dict[str, Path] = {}
    for label, name in re.findall(r"-\s+([^:\n]+):\s+(\S+\.md)\s*$", NAV.read_text(), re.M):
        pages[label.strip()] = pages[headings(ROOT / "docs" / name)[0]] = ROOT / "docs" / name
    places = [(where, m.groups()) for where, text in strings for m in PLACE.finditer(text)]
    assert len(places) >= 7
    for where, (page, section) in places:
        assert page in pages, f"{where}: no page {page!r} in the navigation"
        assert section in headings(pages[page]), f"{where}: no section {section!r} in {page}"

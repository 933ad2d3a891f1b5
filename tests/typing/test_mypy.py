"""``mypy --strict`` on a user's project (user_project.py) finds the types the docs
promise, and catches wrong calls (wrong_calls.py). One mypy run serves every test."""

import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
USER_PROJECT = HERE / "user_project.py"
WRONG_CALLS = HERE / "wrong_calls.py"
EXPECTED = re.compile(r"#\s*E:\s*(.+)$")

pytestmark = pytest.mark.skipif(
    not all(find_spec(name) for name in ("mypy", "mypy_django_plugin", "mypy_drf_plugin")),
    reason="mypy, django-stubs or djangorestframework-stubs is not installed "
    "(pip install -e '.[dev]')",
)


@pytest.fixture(scope="session")
def mypy_errors() -> dict[Path, dict[int, list[str]]]:
    """file -> line -> mypy's error messages there (notes left out)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(HERE / "mypy.ini"),
            "--no-error-summary",
            str(USER_PROJECT),
            str(WRONG_CALLS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode not in (0, 1) or done.stderr.strip():  # 2: mypy itself failed
        pytest.fail(f"mypy did not run:\n{done.stdout}\n{done.stderr}")
    errors: dict[Path, dict[int, list[str]]] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"(.+?):(\d+): error: (.*)$", line)
        if found:
            path, number, message = found.groups()
            errors.setdefault((ROOT / path).resolve(), {}).setdefault(int(number), []).append(
                message
            )
    return errors


def test_user_project_types_as_documented(
    mypy_errors: dict[Path, dict[int, list[str]]],
) -> None:
    assert mypy_errors.get(USER_PROJECT, {}) == {}
    assert set(mypy_errors) <= {USER_PROJECT, WRONG_CALLS}


def test_wrong_calls_are_reported(mypy_errors: dict[Path, dict[int, list[str]]]) -> None:
    lines = WRONG_CALLS.read_text().splitlines()
    expected = {
        number: found.group(1).strip()
        for number, line in enumerate(lines, start=1)
        if (found := EXPECTED.search(line))
    }
    assert expected, "wrong_calls.py marks no expected error"
    reported = mypy_errors.get(WRONG_CALLS, {})
    for number, message in expected.items():
        assert any(message in m for m in reported.get(number, [])), (
            f"wrong_calls.py:{number}: expected {message!r}, mypy said {reported.get(number)}"
        )
    assert set(reported) == set(expected), "mypy reported errors on unmarked lines"

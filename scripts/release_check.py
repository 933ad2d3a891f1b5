"""Build the wheel and the sdist, install each in a fresh virtual environment, and run a new
project's ``manage.py check``, ``migrate`` and more against the installed package.

    python scripts/release_check.py [--workdir DIR]

What it proves: ``twine check --strict`` passes both (their metadata, and a long
description that renders on the package index); for the wheel and then for the sdist
(installed over it, so built from the sdist alone): every file of the package in the
checkout is in the distribution (templates, static files and migrations included); a new
project with the app installed passes ``check`` and ``migrate``; the migrations match the
models (``makemigrations --check``); every template of the package loads;
``collectstatic`` finds its static files. The package is imported from the virtual
environment, never from the checkout.

It needs the ``build`` and ``twine`` packages beside the Python that runs it (the ``dev``
extra has them) and a package index for the dependencies (pip's cache is used, so a second
run downloads nothing). Exits non-zero, saying what is wrong, when a check fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "django_ratequeue"
# The commands' environment: the new project's settings, whatever the caller's were.
ENVIRONMENT = {
    name: value
    for name, value in os.environ.items()
    if name not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV")
}
# What the copy that is built leaves out: nothing of it belongs in a distribution.
NOT_SOURCE = (
    *(".git", ".venv*", ".mypy_cache", ".ruff_cache", ".hypothesis", ".import_linter_cache"),
    *("build", "dist", "*.egg-info", "__pycache__", "*.sqlite3*", ".pytest-ratequeue*"),
)
SETTINGS = """
INSTALLED_APPS += ["rest_framework", "django_q", "django_ratequeue"]
DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}
Q_CLUSTER = {"name": "release", "orm": "default", "timeout": 300, "retry": 360}
STATIC_ROOT = BASE_DIR / "static"
"""
URLS = """
from django.urls import include
urlpatterns += [path("ratequeue/", include("django_ratequeue.urls"))]
"""
# Run in the project by manage.py shell: the package's templates, each loaded.
LOAD_TEMPLATES = """
from pathlib import Path
import django_ratequeue
from django.template.loader import get_template
package = Path(django_ratequeue.__file__).parent
assert "site-packages" in package.parts, f"imported from {package}, not the environment"
templates = package / "templates"
names = [p.relative_to(templates).as_posix() for p in templates.rglob("*.html")]
for name in names:
    get_template(name)
print(f"{len(names)} templates load")
"""


class Failed(Exception):
    """A check failed; its message says which and why."""


def run(*command: str | Path, cwd: Path = ROOT) -> str:
    """Run ``command``; its output, or :class:`Failed` with that output."""
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=ENVIRONMENT, capture_output=True, text=True)
    shown = " ".join(map(str, command)).partition("\n")[0]
    print(f"    {time.monotonic() - started:5.1f} s  {shown[:110]}")
    if done.returncode != 0:
        raise Failed(f"`{shown}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def source_files() -> set[str]:
    """The package's files in the checkout, as paths inside a distribution."""
    found = {p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*") if p.is_file()}
    return {name for name in found if "__pycache__" not in name}


def build(workdir: Path) -> tuple[Path, Path]:
    """Build the sdist, then the wheel from it, from a copy of the checkout; their paths."""
    copy = workdir / "source"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    dist = workdir / "dist"
    run(sys.executable, "-m", "build", "--outdir", dist, copy)
    [sdist] = dist.glob("*.tar.gz")
    [wheel] = dist.glob("*.whl")
    return wheel, sdist


def check_contents(wheel: Path, sdist: Path) -> None:
    """Fail when a file of the package is missing from the wheel or the sdist."""
    expected = source_files()
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as archive:
        in_sdist = {name.partition("/")[2] for name in archive.getnames()}
    for what, names in (("wheel", in_wheel), ("sdist", in_sdist)):
        missing = sorted(expected - names)
        if missing:
            raise Failed(f"The {what} lacks {len(missing)} file(s): {', '.join(missing)}")
    print(f"==> the wheel and the sdist hold all {len(expected)} files of the package")


def new_project(python: Path, workdir: Path) -> Path:
    """A project made by startproject with the app installed and its URLs included."""
    run(python, "-m", "django", "startproject", "mysite", cwd=workdir)
    project = workdir / "mysite"
    with open(project / "mysite" / "settings.py", "a") as settings:
        settings.write(SETTINGS)
    with open(project / "mysite" / "urls.py", "a") as urls:
        urls.write(URLS)
    return project


def check_installed(python: Path, project: Path, what: str) -> None:
    """Run the project's checks against the installed package, on a database of its own."""
    (project / "db.sqlite3").unlink(missing_ok=True)
    shutil.rmtree(project / "static", ignore_errors=True)
    manage = (python, "manage.py")
    run(*manage, "check", "--fail-level", "WARNING", cwd=project)
    run(*manage, "migrate", "--no-input", cwd=project)
    run(*manage, "makemigrations", "--check", "--dry-run", PACKAGE, cwd=project)
    loaded = run(*manage, "shell", "-c", LOAD_TEMPLATES, cwd=project).strip().splitlines()[-1]
    run(*manage, "collectstatic", "--no-input", cwd=project)
    static = project / "static" / "ratequeue"
    expected = {p.name for p in (ROOT / PACKAGE / "static" / "ratequeue").iterdir()}
    collected = {p.name for p in static.iterdir()} if static.is_dir() else set()
    if expected - collected:
        raise Failed(f"collectstatic did not find {sorted(expected - collected)}")
    print(f"==> {what}: check, migrate and makemigrations --check pass; {loaded}; "
          f"collectstatic finds all {len(expected)} static files")  # fmt: skip


def release_check(workdir: Path) -> None:
    """Build, then install and check the wheel, then the sdist, in one new environment."""
    wheel, sdist = build(workdir)
    print(f"==> built {wheel.name} and {sdist.name}")
    run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    print("==> twine check --strict passes the wheel and the sdist")
    check_contents(wheel, sdist)
    venv = workdir / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    run(*pip, f"{PACKAGE}[drf] @ {wheel.as_uri()}")
    project = new_project(python, workdir)
    check_installed(python, project, "the wheel")
    run(*pip, "--force-reinstall", "--no-deps", sdist)
    check_installed(python, project, "the sdist")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument(
        "--workdir",
        type=Path,
        help="a new or empty directory to work in (default: a temporary one)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ratequeue-release-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            release_check(workdir)
        except Failed as failed:
            print(f"==> the release check FAILED: {failed}", file=sys.stderr)
            return 1
    print("==> the release check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

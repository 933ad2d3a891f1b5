"""``manage.py ratequeue_worker_app``: build the remote worker as one file, a zipapp.

The archive holds the ``worker`` package, with ``pool.py``, ``timelimits.py`` and
``plain.py`` beside it, and a ``__main__.py`` that runs the worker: it needs Python's
standard library only, so a host without Django or this package runs it as ``python
ratequeue-worker.pyz --url ...`` (docs/remote-workers.md)."""

from __future__ import annotations

import shutil
import tempfile
import zipapp
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

PACKAGE = Path(__file__).resolve().parents[2]
# The worker package's modules in the archive: all but its __main__.py (the archive has its own).
WORKER_MODULES = ("__init__", "attempt", "client", "handlers", "program", "serving")
# The archive's modules: where each comes from in the package.
MODULES = {
    **{f"worker/{name}.py": f"worker/{name}.py" for name in WORKER_MODULES},
    "pool.py": "engine/pool.py",
    "timelimits.py": "engine/timelimits.py",
    "plain.py": "plain.py",
}
# Handler modules are found in the current directory, as with ``python -m``.
MAIN = '''"""Run the remote worker of django-ratequeue (manage.py ratequeue_worker_app)."""

import os
import sys

sys.path.insert(1, os.getcwd())

import worker  # noqa: E402

raise SystemExit(worker.main())
'''


class Command(BaseCommand):
    help = "Build the remote worker as a single-file zipapp that runs without Django."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output", default="ratequeue-worker.pyz", help="Where to write the archive."
        )
        parser.add_argument(
            "--python",
            default="/usr/bin/env python3",
            help="The interpreter of its #! line, for running it as ./ratequeue-worker.pyz.",
        )

    def handle(self, *args: Any, output: str, python: str, **options: Any) -> None:
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder)
            (source / "worker").mkdir()
            for name, path in MODULES.items():
                shutil.copyfile(PACKAGE / path, source / name)
            (source / "__main__.py").write_text(MAIN)
            zipapp.create_archive(source, output, interpreter=python)
        self.stdout.write(f"Wrote {output}: python {output} --help tells how to run it.")

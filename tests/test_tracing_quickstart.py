"""docs/tracing.md's quickstart works as written: run in a fresh process, its provider
exports the spans django-ratequeue makes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "tracing.md"
MARKER = "<!-- tests/test_tracing_quickstart.py runs this block -->"


def quickstart() -> str:
    """Return the code block that follows the marker in docs/tracing.md."""
    after = DOCS.read_text().split(MARKER, 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_quickstart_exports_an_enqueue_span() -> None:
    program = (
        quickstart()
        + "\nfrom django_ratequeue.tracing import enqueue_span\n"
        + "with enqueue_span('myapp.jobs.send_mail', 'emails'):\n    pass\n"
        + "provider.shutdown()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    span = json.loads(done.stdout)
    assert span["name"] == "enqueue myapp.jobs.send_mail"
    assert span["kind"] == "SpanKind.PRODUCER"
    assert span["attributes"] == {
        "ratequeue.function": "myapp.jobs.send_mail",
        "ratequeue.queue": "emails",
    }
    assert span["resource"]["attributes"]["service.name"] == "myproject"

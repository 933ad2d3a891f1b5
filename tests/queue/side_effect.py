"""A module that acts when imported, and whose function acts when run: naming it in an
enqueue, an ``on_complete`` or a job row must do neither, since nothing here is a job.

When ``RATEQUEUE_SIDE_EFFECT_LOG`` names a file, importing this module appends "imported"
to it and running :func:`wipe` appends "ran", so a test sees what qcluster workers did.
"""

from __future__ import annotations

import os
from typing import Any

from tests.queue.jobs import append_line

LOG = "RATEQUEUE_SIDE_EFFECT_LOG"

if os.environ.get(LOG):
    append_line(os.environ[LOG], "imported")


def wipe(*args: Any, **kwargs: Any) -> None:
    """What a forged row would like to run."""
    if os.environ.get(LOG):
        append_line(os.environ[LOG], "ran")

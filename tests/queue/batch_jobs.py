"""Registered jobs for the batch tests: a callback that records, a job that fans out."""

from __future__ import annotations

import json
from typing import Any

from django_ratequeue import current_batch, job
from tests.queue import jobs


@job(retries=0)
def record_outcome(outcome: dict[str, Any]) -> None:
    """A batch's on_complete: append the outcome it received to the path in its context."""
    jobs.append_line(outcome["context"]["path"], json.dumps(outcome, sort_keys=True))


@job(retries=0)
def fan_out(children: int) -> int:
    """Enqueue ``children`` add jobs into this job's own batch."""
    batch = current_batch()
    assert batch is not None
    with batch.adding():
        for index in range(children):
            jobs.add.enqueue(index, index)
    return children

"""Jobs whose calls into the engine meet a database blip (tests/queue/test_database_blips.py)."""

from __future__ import annotations

import time
from pathlib import Path

from django_ratequeue import enqueue, job, report_progress, stream_output
from django_ratequeue.models import Job
from tests.queue import jobs


def wait_for_file(marker: str, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@job
def talk_through_blips(log: str, release: str, child_log: str, child_release: str) -> str:
    """Read the database and say so; once ``release`` exists, stream and report progress,
    then wait on a subtask that blocks until ``child_release`` exists.

    Each step after the first read meets the connections the test cut meanwhile."""
    Job.objects.exists()  # this thread's connection, which the test then cuts
    jobs.record(log, "started")
    wait_for_file(release)
    for done, word in enumerate(["one ", "two ", "three "], 1):
        stream_output(word)
        report_progress({"done": done, "total": 3})
        time.sleep(0.1)
    child = enqueue(jobs.block_until_file, args=[child_log, child_release, 60])
    return f"{child.result(timeout=90)} after {Path(release).name}"

"""Handlers of the remote workers the tests start: standard library only, as on a host
without Django. Each records what it ran in the file it is given, one line per call."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from django_ratequeue.worker import handler, report_progress, stream_output
from tests.hostile import api_of, run


def append_line(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


@handler("tests.queue.jobs.record")
def record(path: str, label: str) -> str:
    append_line(path, f"{label} {os.getpid()}")
    return label


@handler("tests.queue.jobs.block_until_file")
def block_until_file(path: str, marker: str, limit: float = 30) -> str:
    """Say it started (with this process's pid), stream a line, then wait for ``marker``."""
    append_line(path, f"start {os.getpid()}")
    stream_output(f"started in {os.getpid()}\n")
    deadline = time.monotonic() + limit
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    return "released"


@handler("tests.queue.jobs.record_then_block")
async def record_then_block(path: str, label: str, marker: str = "", limit: float = 30) -> str:
    """An ``async def`` handler: record this run (with the thread it runs on), then wait
    for ``marker`` without holding a thread."""
    append_line(path, f"{label} {os.getpid()} {threading.current_thread().name}")
    deadline = time.monotonic() + limit
    while marker and not os.path.exists(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return label


# The hostile catalogue (tests/hostile.py), as a remote worker runs it.
HOSTILE_API = api_of(report_progress, stream_output)


@handler("tests.queue.hostile_jobs.hostile")
def hostile(kind: str) -> Any:
    return run(kind, HOSTILE_API)


@handler("tests.queue.hostile_jobs.hostile_async")
async def hostile_async(kind: str) -> Any:
    return run(kind, HOSTILE_API)


@handler("tests.queue.hostile_jobs.innocent")
def innocent(label: str) -> str:
    return label

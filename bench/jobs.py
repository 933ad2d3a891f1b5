"""The jobs the benchmarks run, plain functions that ours and django-q2 both call.

Nothing here imports django-ratequeue: django-q2 "alone" runs them without our app.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import time


def noop() -> None:
    """The unit of work of the throughput runs: nothing, so only the queue's cost shows."""


def pause(ms: float) -> None:
    """The short job of the steady-traffic runs (bench.steady): ``ms`` milliseconds asleep,
    like a quick call to another service."""
    time.sleep(ms / 1000)


def record_start(seq: int) -> None:
    """The latency probe: store the moment this job began."""
    from bench.models import JobStart

    started = time.time()
    JobStart.objects.create(seq=seq, started=started)


def observed_run(log: str, label: str, seconds: float) -> str:
    """A job of the fault drill: append its start and its end (with this process's id) to
    ``log``. A file, not a table, so that the record survives what the drill does to the
    database and to processes; a run cut short by ``kill -9`` has no end line."""
    pid = os.getpid()
    _append(log, f"start {label} {pid} {time.time():.6f}")
    try:
        time.sleep(seconds)
    finally:
        _append(log, f"end {label} {pid} {time.time():.6f}")
    return label


def wait_on_network(port: int, ms: int) -> int:
    """The IO-bound job, sync: one HTTP request to bench.io's local server, which answers
    after ``ms`` milliseconds, on a blocking socket (``http.client``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", f"/wait?ms={ms}")
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


async def await_on_network(port: int, ms: int) -> int:
    """The IO-bound job, ``async def``: the same request on asyncio streams."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /wait?ms={ms} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()  # the server closes the connection after its answer
        return int(status_line.split()[1])
    finally:
        writer.close()


def exit_worker() -> None:
    """A poison job of the fault drill: what ``sys.exit()`` deep inside a library does."""
    raise SystemExit(3)


def fail() -> None:
    """A job that always fails (the drill gives it an absurd retry interval)."""
    raise RuntimeError("this job always fails")


def _append(path: str, line: str) -> None:
    """One ``write`` with ``O_APPEND``: lines of concurrent writers stay whole."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)

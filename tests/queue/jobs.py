"""Job functions the queue tests enqueue, registered with ``@job``: RATEQUEUE["JOB_MODULES"]
in the test settings imports this module at start-up, in the tests and in qcluster workers."""

from __future__ import annotations

import asyncio
import fcntl
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django_ratequeue import (
    Handle,
    NonRetryableError,
    cancel_requested,
    get_handle,
    job,
    report_progress,
    stream_output,
)
from django_ratequeue.engine.subtasks import current_job_id


@job
def add(a: int, b: int) -> int:
    return a + b


@job
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@job(queue="decorated", retries=2, timeout=30)
def decorated(x: int) -> int:
    return x * 2


@job
def route(
    queue: str = "", args: list[Any] | None = None, kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Parameters named like enqueue's options and arguments: they are never confused."""
    return {"queue": queue, "args": args, "kwargs": kwargs}


@job
def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@job
def fail(message: str = "boom") -> None:
    raise ValueError(message)


@job
def fail_hard(message: str = "no point retrying") -> None:
    raise NonRetryableError(message)


def append_line(path: str, text: str) -> None:
    """Append one line (O_APPEND keeps concurrent writers' lines whole)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


@job
def record(path: str, label: str) -> str:
    append_line(path, f"{label} {time.time():.6f} {os.getpid()}")
    return label


@job
def span(path: str, label: str, seconds: float) -> str:
    """Sleep ``seconds`` and record the run: label, pid, start and end (epoch seconds)."""
    start = time.time()
    time.sleep(seconds)
    append_line(path, f"{label} {os.getpid()} {start:.6f} {time.time():.6f}")
    return label


@job
def fail_then_record(path: str, label: str) -> None:
    """Record the attempt's time and fail, so that the test can read the back-off."""
    record(path, label)
    raise RuntimeError(f"attempt of {label} failed")


@job
def block_until_file(path: str, marker: str, limit: float = 30) -> str:
    """Record that it started (with its pid), then wait until ``marker`` exists."""
    record(path, "started")
    deadline = time.monotonic() + limit
    while not Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "released"


@job
def observed(counter: str, groups: list[str], seconds: float) -> None:
    """Count this job as running in each group while it sleeps; keep the peak per group."""
    _adjust(counter, groups, +1)
    try:
        time.sleep(seconds)
    finally:
        _adjust(counter, groups, -1)


def _adjust(counter: str, groups: list[str], delta: int) -> None:
    fd = os.open(counter, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed, after the write
        state = json.loads(os.read(fd, 1 << 16) or b'{"now": {}, "peak": {}}')
        for group in groups:
            state["now"][group] = state["now"].get(group, 0) + delta
            state["peak"][group] = max(state["peak"].get(group, 0), state["now"][group])
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(state).encode())
    finally:
        os.close(fd)


@job
def callback(outcome: dict[str, Any]) -> None:
    """An on_complete target: writes the outcome it received to the path in its context."""
    append_line(outcome["context"]["path"], json.dumps(outcome, sort_keys=True))


@job
def sleep_and_record(path: str, label: str, seconds: float) -> str:
    time.sleep(seconds)
    return record(path, label)


@job
def spawn_and_wait(x: int, child_queue: Any = None) -> int:
    """Enqueue add(x, x) as a subtask (in ``child_queue``) and wait for it."""
    child = add.using(queue=child_queue).enqueue(x, x)
    return child.result(timeout=60) * 10


@job
def spawn(x: int) -> str:
    """Enqueue add(x, x) as a subtask, without waiting for it; return its id."""
    return add.enqueue(x, x).id


@job
def spawn_nested(name: str) -> int:
    """Wait on a subtask in queue ``name`` that itself waits on a subtask in ``name``."""
    return spawn_and_wait.using(queue=name).enqueue(1, name).result(timeout=60)


@job
def wait_on_self() -> None:
    get_handle(current_job_id()).result(timeout=60)


@job
def return_nul() -> str:
    return "a\x00b"


@job
def fail_with_nul() -> None:
    raise ValueError("bad \x00 value")


@job
def return_surrogate() -> str:
    """Returns a file name as os.fsdecode() gives one that is not UTF-8."""
    return os.fsdecode(b"caf\xe9.txt")


@job
def fail_with_surrogate() -> None:
    raise FileNotFoundError("no such file: " + os.fsdecode(b"caf\xe9.txt"))


@job
def return_nested(depth: int) -> list[Any]:
    """Returns lists nested ``depth`` deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@job
def record_then_block(path: str, label: str, marker: str = "", limit: float = 30) -> str:
    """Record this run (with its pid); given a ``marker``, then wait until it exists."""
    record(path, label)
    deadline = time.monotonic() + limit
    while marker and not Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return label


@job
def exit_worker(code: int = 3) -> None:
    """A job that tries to end its worker process."""
    sys.exit(code)


@job
def interrupt() -> None:
    raise KeyboardInterrupt


class ProcessStopping(BaseException):
    """Stands for what stops a process from outside the job's control (not an Exception)."""


@job
def stop_process() -> None:
    raise ProcessStopping("the process is going")


@job
def fail_together() -> None:
    """Fails with a group of errors, whose traceback ends with the last one's."""
    raise ExceptionGroup("two things went wrong", [KeyError("first"), ValueError("second")])


@job
def fail_once(marker: str) -> str:
    """Fails the first time (creating ``marker``), succeeds afterwards."""
    if not os.path.exists(marker):
        Path(marker).touch()
        raise RuntimeError("first try")
    return "second try"


@job
def fail_with_a_hostile_class() -> None:
    """Raises an exception whose class path holds a NUL and is 10 MB long."""
    hostile = type("Hostile", (Exception,), {"__module__": "a\x00b" + "c" * 10_000_000})
    raise hostile("boom")


@job
def stream_words(words: list[str], pause: float = 0) -> int:
    """Stream each word as a model streams its tokens, with progress after each."""
    for done, word in enumerate(words, 1):
        stream_output(word)
        report_progress({"done": done, "total": len(words)})
        if pause:
            time.sleep(pause)
    return len(words)


@job
def stream_then_fail_once(marker: str, words: list[str], pause: float = 0) -> int:
    """Streams ``words`` with progress, as :func:`stream_words`; the first time (creating
    ``marker``) it fails halfway through, the next time it streams them all."""
    first = not os.path.exists(marker)
    if first:
        Path(marker).touch()
    for done, word in enumerate(words, 1):
        stream_output(f"{word} ")
        report_progress({"done": done, "total": len(words)})
        if first and done == len(words) // 2:
            raise ConnectionError("the model went away halfway through")
        if pause:
            time.sleep(pause)
    return len(words)


@job
def report_then_change() -> None:
    """Reports a dict, then changes it: what was reported stays."""
    progress: dict[str, Any] = {"step": "download"}
    report_progress(progress)
    progress["step"] = "changed afterwards"


@job
def misreport(cases: list[str]) -> list[str]:
    """Makes each named bad call, returning what each raised (``type: message``)."""
    calls: dict[str, Callable[[], None]] = {
        "progress list": lambda: report_progress([1, 2]),  # type: ignore[arg-type]
        "progress nan": lambda: report_progress({"x": math.nan}),
        "progress object": lambda: report_progress({"x": object()}),
        "progress nul": lambda: report_progress({"x": "a\x00b"}),
        "progress big": lambda: report_progress({"x": "y" * 200}),
        "progress surrogate": lambda: report_progress({"x": os.fsdecode(b"\xe9")}),
        "progress deep": lambda: report_progress({"x": return_nested(1000)}),
        "output bytes": lambda: stream_output(b"bytes"),  # type: ignore[arg-type]
        "output nul": lambda: stream_output("a\x00b"),
        "output surrogate": lambda: stream_output("\ud800"),
        "output chunk": lambda: stream_output("z" * 101),
        "output total": lambda: [stream_output("w" * 100) for _ in range(3)] and None,
    }
    raised = []
    for case in cases:
        try:
            calls[case]()
        except Exception as exc:
            raised.append(f"{type(exc).__name__}: {exc}")
        else:
            raised.append("nothing")
    return raised


# async def jobs: they run on an event loop of the worker, many at once.


@job
async def add_later(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@job
async def stream_words_later(words: list[str]) -> int:
    """:func:`stream_words` from an ``async def`` job."""
    for done, word in enumerate(words, 1):
        stream_output(word)
        report_progress({"done": done, "total": len(words)})
        await asyncio.sleep(0)
    return len(words)


@job
async def fail_later(message: str = "boom") -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


@job
async def await_subtask(x: int, child_queue: Any = None) -> dict[str, int]:
    """Enqueue add(x, x) as a subtask and await it, while another task of the event loop
    counts ticks: the wait must not stop the loop."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        child = await add.using(queue=child_queue).aenqueue(x, x)
        value = await child.aresult(timeout=60)
    finally:
        ticker.cancel()
    return {"value": value * 10, "ticks": ticks}


@job
async def await_self() -> None:
    # get_handle() reads the database: a Handle, built without, suits an event loop.
    await Handle(current_job_id()).aresult(timeout=60)


@job
async def block_on_result(job_id: str) -> None:
    """Calls the blocking ``result()`` inside its event loop: refused."""
    Handle(job_id).result(timeout=1)


@job
async def await_job(job_id: str) -> int:
    """Await the result of job ``job_id`` (a subtask wait), times ten."""
    return await Handle(job_id).aresult(timeout=60) * 10


@job
async def sleep_later(seconds: float) -> str:
    """Waits without holding a thread: a cancel or a time limit cancels its task."""
    await asyncio.sleep(seconds)
    return "slept"


@job
def wait_for_cancel(limit: float = 30) -> str:
    """A plain function that stops when its job is canceled, as the docs say to."""
    deadline = time.monotonic() + limit
    while not cancel_requested() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "stopped" if cancel_requested() else "not canceled"


@job
def spin(seconds: float) -> str:
    """Busy in Python code for ``seconds``: a time limit interrupts it at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(100))
    return "spun"


@job
def decide(name: str, times: int) -> int:
    """Consume the rate limit ``name`` (3 an hour) ``times`` times; return how many passed."""
    from django_ratequeue import TokenBucket, rate_limit

    limit = TokenBucket(rate=3, period=3600)
    return sum(rate_limit(name, config=limit).ok for _ in range(times))

"""django_ratequeue.engine.pool: calls at once, their ends, time limits and cancels, in process.

No timings are asserted: waits have deadlines, and what is checked is what ran at once
and how each call ended."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from django_ratequeue.engine.pool import Call, Finished, Pool, TimedOut, cancel_requested

DEADLINE = 30.0


class Ends:
    """The ends a Pool reports, to wait on."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Finished] = queue.SimpleQueue()

    def __call__(self, finished: Finished) -> None:
        self.queue.put(finished)

    def take(self, count: int) -> dict[Any, Finished]:
        return {f.key: f for f in (self.queue.get(timeout=DEADLINE) for _ in range(count))}


def gate(parties: int) -> tuple[Callable[[], str], Callable[[], Any]]:
    """A plain and an async function that return only once ``parties`` calls are in at once."""
    barrier = threading.Barrier(parties, timeout=DEADLINE)

    def plain() -> str:
        barrier.wait()
        return threading.current_thread().name

    async def awaited() -> str:
        await asyncio.to_thread(barrier.wait)
        return threading.current_thread().name

    return plain, awaited


def test_plain_and_async_calls_run_at_once_each_where_it_belongs() -> None:
    ends = Ends()
    pool = Pool(6, ends, name="t")
    plain, awaited = gate(6)
    for n in range(3):
        pool.start(Call(("plain", n), plain))
        pool.start(Call(("async", n), awaited, is_async=True))
    assert pool.free == 0
    finished = ends.take(6)
    assert all(f.error is None for f in finished.values())
    plain_threads = {finished["plain", n].value for n in range(3)}
    assert len(plain_threads) == 3 and all(n.startswith("t-") for n in plain_threads)
    assert {finished["async", n].value for n in range(3)} == {"t-loop"}
    assert pool.wait_idle(DEADLINE) and pool.free == 6


def test_a_full_pool_refuses_another_call() -> None:
    pool = Pool(1, Ends())
    release = threading.Event()
    pool.start(Call("long", lambda: release.wait(DEADLINE)))
    with pytest.raises(RuntimeError, match="All 1 slots are taken"):
        pool.start(Call("more", lambda: None))
    release.set()
    assert pool.wait_idle(DEADLINE)


def test_what_a_call_raises_is_its_end_and_the_thread_goes_on() -> None:
    ends = Ends()
    pool = Pool(1, ends)

    def exits() -> None:
        raise SystemExit(3)

    pool.start(Call("exits", exits))
    assert isinstance(ends.take(1)["exits"].error, SystemExit)
    pool.start(Call("next", lambda: 42))
    assert ends.take(1)["next"].value == 42


def test_a_plain_call_past_its_time_limit_is_interrupted() -> None:
    ends = Ends()
    pool = Pool(2, ends)

    def spins() -> None:
        while True:
            sum(range(100))

    pool.start(Call("spins", spins, timeout=0.2))
    pool.start(Call("quick", lambda: "done", timeout=5))
    finished = ends.take(2)
    assert finished["quick"].value == "done" and not finished["quick"].timed_out
    assert finished["spins"].timed_out and not finished["spins"].stuck
    assert isinstance(finished["spins"].error, TimedOut)
    assert pool.wait_idle(DEADLINE)


def test_an_async_call_past_its_time_limit_is_cancelled() -> None:
    ends = Ends()
    pool = Pool(2, ends)
    cleaned = threading.Event()

    async def waits() -> None:
        try:
            await asyncio.sleep(DEADLINE)
        finally:
            cleaned.set()

    pool.start(Call("waits", waits, is_async=True, timeout=0.2))
    finished = ends.take(1)["waits"]
    assert finished.timed_out and isinstance(finished.error, TimedOut)
    assert cleaned.is_set()


def test_a_call_that_will_not_stop_is_reported_and_keeps_its_slot_until_it_ends() -> None:
    ends = Ends()
    pool = Pool(2, ends, interrupt_with=TimeoutError)
    release = threading.Event()

    def blocks_in_c() -> str:
        release.wait(DEADLINE)  # a wait in C: the interruption lands only as it returns
        return "late"

    pool.start(Call("blocks", blocks_in_c, timeout=0.1))
    finished = ends.take(1)["blocks"]
    assert finished.timed_out and finished.stuck
    assert isinstance(finished.error, TimeoutError)
    assert "did not stop when interrupted" in str(finished.error)
    assert pool.stuck == 1 and pool.free == 1
    release.set()
    assert pool.wait_idle(DEADLINE) and pool.stuck == 0
    assert ends.queue.empty()  # its end is not reported twice


def test_a_cancel_reaches_an_async_call_and_a_plain_one_that_looks() -> None:
    ends = Ends()
    pool = Pool(2, ends)
    started = threading.Barrier(3, timeout=DEADLINE)

    async def waits() -> None:
        started.wait()
        await asyncio.sleep(DEADLINE)

    def looks() -> str:
        started.wait()
        deadline = time.monotonic() + DEADLINE
        while not cancel_requested() and time.monotonic() < deadline:
            time.sleep(0.01)
        return "stopped"

    pool.start(Call("async", waits, is_async=True))
    pool.start(Call("plain", looks))
    started.wait()
    pool.cancel("async")
    pool.cancel("plain")
    finished = ends.take(2)
    assert isinstance(finished["async"].error, asyncio.CancelledError)
    assert finished["plain"].value == "stopped"
    assert not cancel_requested()  # outside a call: nothing to cancel


def test_run_here_runs_in_this_thread_under_the_time_limit() -> None:
    pool = Pool(0, Ends())
    here = threading.current_thread().name
    assert pool.run_here(Call("plain", lambda: threading.current_thread().name)).value == here

    async def awaited() -> int:
        await asyncio.sleep(0)
        return 7

    assert pool.run_here(Call("async", awaited, is_async=True)).value == 7

    def spins() -> None:
        while True:
            sum(range(100))

    finished = pool.run_here(Call("spins", spins, timeout=0.2))
    assert finished.timed_out and isinstance(finished.error, TimedOut)

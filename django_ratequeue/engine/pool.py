"""The pool: many calls at once in one process, sync ones on threads, async ones on one loop.

A :class:`Pool` runs up to ``size`` calls at a time, each in a slot of the pool; a call
past its time limit is interrupted, and one that does not stop is *stuck*.
docs/concepts.md ("Runners", "Time limits in slots") tells how. Standard library only:
the remote worker (``worker/``) runs it too, with ``timelimits.py``, in its zipapp.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

if __package__:  # django_ratequeue.engine.pool, in the installed package
    from django_ratequeue.engine.timelimits import Watchdog, clear_interruption, raise_in
else:  # pool.py in the zipapp (manage.py ratequeue_worker_app), timelimits.py beside it
    from timelimits import Watchdog, clear_interruption, raise_in  # type: ignore[no-redef]

logger = logging.getLogger(__name__)

# A thread that finished its call waits this long for another, then ends.
IDLE_EXIT = 2.0


class TimedOut(Exception):
    """Raised in a call that ran past its time limit.

    It is raised at the next line of Python the call runs: a thread blocked in C code, a
    ``time.sleep`` or a socket read, sees it when that returns."""


@dataclass(frozen=True)
class Call:
    """What to run in a slot: ``function()``, in ``context``, under a time limit.

    A coroutine function's coroutine is awaited. The call is interrupted after ``timeout``
    seconds (None: never)."""

    key: Hashable
    function: Callable[[], Any]
    is_async: bool = False
    timeout: float | None = None
    context: contextvars.Context = field(default_factory=contextvars.copy_context)


@dataclass(frozen=True)
class Finished:
    """How a call ended: its value, or what it raised.

    ``timed_out`` when its time limit ended it (``stuck``: and it has not stopped yet);
    ``ended`` is a ``time.monotonic()`` reading."""

    key: Hashable
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    stuck: bool = False
    ended: float = field(default_factory=time.monotonic)


class _Running:
    """A call in a slot, and what became of it so far."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.cancel = threading.Event()
        self.thread_id: int | None = None
        self.task: asyncio.Task[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.interrupted = False
        self.reported = False
        self.ended = False


_current: contextvars.ContextVar[_Running | None] = contextvars.ContextVar(
    "ratequeue_slot", default=None
)


def cancel_requested() -> bool:
    """Return whether the call running here was asked to stop (see :meth:`Pool.cancel`).

    A plain function checks it between steps of its work, and returns or raises."""
    running = _current.get()
    return running is not None and running.cancel.is_set()


class Pool:
    """Run up to ``size`` calls at once, and tell ``on_finish`` of each call's end.

    A plain function runs on a thread of its own, taken from the threads that finished a
    call in the last :data:`IDLE_EXIT` seconds (each keeps its database connections while
    it lives, and closes them as it ends); a coroutine function runs as a task on the one
    event loop of the pool, on a thread of its own. ``on_finish`` is called from the
    thread or loop that ran the call. A call that has not ended ``timelimits.STOP_WAIT``
    seconds after its interruption is reported timed out all the same and keeps its slot until it
    does end: the attempt is over, the thread is not."""

    def __init__(
        self,
        size: int,
        on_finish: Callable[[Finished], None],
        name: str = "slot",
        interrupt_with: type[BaseException] = TimedOut,
    ) -> None:
        self.size = size
        self.interrupt_with = interrupt_with
        self.on_finish = on_finish
        self.name = name
        self._lock = threading.Lock()
        self._running: dict[Hashable, _Running] = {}
        self._idle: list[queue.SimpleQueue[_Running | None]] = []
        self._threads = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog = Watchdog(f"{name}-watchdog", self._interrupt, self._give_up, IDLE_EXIT)

    @property
    def free(self) -> int:
        """How many more calls may start now."""
        with self._lock:
            return self.size - len(self._running)

    @property
    def busy(self) -> int:
        """How many calls hold a slot (stuck ones included)."""
        with self._lock:
            return len(self._running)

    @property
    def stuck(self) -> int:
        """How many calls were reported timed out and still hold their slot."""
        with self._lock:
            return sum(running.reported for running in self._running.values())

    def holds(self, key: Hashable) -> bool:
        """Return whether the call ``key`` holds a slot still (a stuck one included)."""
        with self._lock:
            return key in self._running

    def start(self, call: Call) -> None:
        """Start ``call`` in a free slot (there must be one)."""
        running = _Running(call)
        with self._lock:
            if len(self._running) >= self.size:
                raise RuntimeError(f"All {self.size} slots are taken.")
            if call.key in self._running:
                raise RuntimeError(f"{call.key!r} is running already.")
            self._running[call.key] = running
            inbox = self._idle.pop() if self._idle and not call.is_async else None
        if call.timeout is not None and call.timeout > 0:
            self._watchdog.add(time.monotonic() + call.timeout, running)
        if call.is_async:
            self._event_loop().call_soon_threadsafe(self._create_task, running)
        elif inbox is not None:
            inbox.put(running)
        else:
            inbox = queue.SimpleQueue()
            inbox.put(running)
            name = f"{self.name}-{next(self._threads)}"
            threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()

    def cancel(self, key: Hashable) -> None:
        """Ask a call to stop.

        An async call's task is cancelled, a plain function sees :func:`cancel_requested`."""
        with self._lock:
            running = self._running.get(key)
        if running is None:
            return
        running.cancel.set()
        if running.call.is_async and running.loop is not None:
            running.loop.call_soon_threadsafe(self._cancel_task, running)

    def run_here(self, call: Call) -> Finished:
        """Run ``call`` in this thread, under its time limit, and return how it ended.

        It is the in-process step that tests take (a coroutine function runs on a loop of
        its own)."""
        running = _Running(call)
        with self._lock:
            self._running[call.key] = running
        if call.timeout is not None and call.timeout > 0:
            self._watchdog.add(time.monotonic() + call.timeout, running)
        if not call.is_async:
            finished = self._call_here(running)
        else:
            value, error = None, None
            try:
                value = call.context.run(asyncio.run, self._run_here_async(running))
            except BaseException as exc:  # what the call raised is its outcome
                error = exc
            finished = self._ended(running, value, error)
        return finished or Finished(
            call.key, None, self.interrupt_with(_timed_out_text(call)), True
        )

    async def _run_here_async(self, running: _Running) -> Any:
        running.loop, running.task = asyncio.get_running_loop(), asyncio.current_task()
        _current.set(running)
        return await running.call.function()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call holds a slot, at most ``timeout`` seconds.

        Return whether none does."""
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.busy

    # Plain functions: a thread per call, kept for the next one a while.

    def _serve(self, inbox: queue.SimpleQueue[_Running | None]) -> None:
        try:
            while True:
                try:
                    running = inbox.get(timeout=IDLE_EXIT)
                except queue.Empty:
                    with self._lock:
                        if inbox in self._idle:
                            self._idle.remove(inbox)
                            return
                    continue  # a call is on its way to this thread
                if running is None:
                    return
                self._run_sync(running)
                with self._lock:
                    self._idle.append(inbox)
        finally:
            _close_connections()

    def _run_sync(self, running: _Running) -> None:
        try:
            finished = self._call_here(running)
            if finished is not None:
                self._tell(finished)
        finally:
            _after_call()

    def _call_here(self, running: _Running) -> Finished | None:
        """Run a plain function's call in this thread, and return how it ended.

        Return None when it was reported stuck already."""
        value, error = None, None
        try:
            running.thread_id = threading.get_ident()
            try:
                value = running.call.context.run(_invoke, running)
            except BaseException as exc:  # everything a job raises is its outcome
                error = exc
            return self._ended(running, value, error)
        except self.interrupt_with:  # arrived after the call's own end, in the lines above
            return self._ended(running, value, error)

    # Coroutine functions: tasks on one event loop.

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                name = f"{self.name}-loop"
                threading.Thread(
                    target=self._run_loop, args=(self._loop,), name=name, daemon=True
                ).start()
            return self._loop

    def _run_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.run_forever()
        finally:
            loop.close()
            _close_connections()

    def _stop_loop_if_idle(self) -> None:
        """Stop the event loop (its thread ends) when no async call runs any more."""
        with self._lock:
            if self._loop is None or any(r.call.is_async for r in self._running.values()):
                return
            loop, self._loop = self._loop, None
        loop.stop()

    def _create_task(self, running: _Running) -> None:
        loop = running.loop = self._event_loop()
        running.task = loop.create_task(self._run_async(running), context=running.call.context)
        if running.cancel.is_set() or running.interrupted:
            running.task.cancel()

    async def _run_async(self, running: _Running) -> None:
        _current.set(running)
        value, error = None, None
        try:
            value = await running.call.function()
        except BaseException as exc:  # cancellation included: the outcome
            error = exc
        self._end(running, value, error)
        asyncio.get_running_loop().call_later(IDLE_EXIT, self._stop_loop_if_idle)

    def _cancel_task(self, running: _Running) -> None:
        if running.task is not None:
            running.task.cancel()

    # Ends and interruptions.

    def _end(self, running: _Running, value: Any, error: BaseException | None) -> None:
        finished = self._ended(running, value, error)
        if finished is not None:
            self._tell(finished)

    def _tell(self, finished: Finished) -> None:
        """Tell ``on_finish`` of a call's end; what it raises is logged, the slot goes on."""
        try:
            self.on_finish(finished)
        except BaseException:  # the slot's thread or loop must outlive any call's end
            logger.exception("Could not take the end of call %r", finished.key)

    def _ended(
        self, running: _Running, value: Any, error: BaseException | None
    ) -> Finished | None:
        """Free the call's slot; return how it ended, unless that was reported (stuck)."""
        with self._lock:
            running.ended = True
            if running.thread_id is not None and running.interrupted:
                clear_interruption(running.thread_id)
            self._running.pop(running.call.key, None)
            reported, running.reported = running.reported, True
        if running.call.timeout is not None:
            self._watchdog.ended()
        if reported:
            return None
        if running.interrupted:
            error = self.interrupt_with(_timed_out_text(running.call))
        return Finished(running.call.key, value, error, running.interrupted)

    def _interrupt(self, running: _Running) -> bool:
        """Interrupt a call past its time limit; return False if it had ended."""
        with self._lock:
            if running.ended:
                return False
            running.interrupted = True
            if running.thread_id is not None:
                raise_in(running.thread_id, self.interrupt_with)
        if running.call.is_async and running.loop is not None:
            running.loop.call_soon_threadsafe(self._cancel_task, running)
        return True

    def _give_up(self, running: _Running) -> None:
        """Report a call that did not stop when interrupted; it keeps its slot until it ends."""
        with self._lock:
            if running.ended or running.reported:
                return
            running.reported = True
        text = _timed_out_text(running.call) + " It did not stop when interrupted."
        error = self.interrupt_with(text)
        self._tell(Finished(running.call.key, None, error, timed_out=True, stuck=True))


def _invoke(running: _Running) -> Any:
    _current.set(running)
    return running.call.function()


def _timed_out_text(call: Call) -> str:
    return f"The attempt ran past its timeout of {call.timeout:g} seconds."


def _after_call() -> None:
    """Close what a call left open or broken of this thread's database connections.

    That is a transaction it did not end, or an error that left the connection unusable."""
    for connection in _django_connections():
        if connection.in_atomic_block or (
            connection.errors_occurred and not connection.is_usable()
        ):
            connection.close()


def _close_connections() -> None:
    """Close this thread's database connections as it ends."""
    for connection in _django_connections():
        connection.close()


def _django_connections() -> list[Any]:
    """Return this thread's open Django database connections (none without Django set up)."""
    try:
        from django.conf import settings
        from django.db import connections
    except ImportError:
        return []
    if not settings.configured:
        return []
    return list(connections.all(initialized_only=True))

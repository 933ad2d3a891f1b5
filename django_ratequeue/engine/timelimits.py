"""Time limits of the calls in a pool's slots: a watchdog thread interrupts each call at
its deadline, by an exception raised in the thread that runs it.

Standard library only, as ``pool.py``, beside which the zipapp of the remote worker
holds it (``manage.py ratequeue_worker_app``). docs/concepts.md ("Time limits in slots")
tells how.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

# How long an interrupted call has to end before it is reported timed out anyway.
STOP_WAIT = 0.5


class Watched(Protocol):
    """A running call as the watchdog sees it: whether it has ended."""

    ended: bool


class Watchdog:
    """Interrupt calls at their time limits, from one thread.

    ``interrupt(call)`` returns False for a call that had ended; ``give_up(call)`` is told
    of one still running :data:`STOP_WAIT` seconds after its interruption. The thread ends
    after ``idle_exit`` seconds with no deadline; the next deadline starts another."""

    def __init__(
        self,
        name: str,
        interrupt: Callable[[Any], bool],
        give_up: Callable[[Any], None],
        idle_exit: float,
    ) -> None:
        self.name = name
        self.interrupt = interrupt
        self.give_up = give_up
        self.idle_exit = idle_exit
        self.condition = threading.Condition()
        self.deadlines: list[tuple[float, int, bool, Watched]] = []
        self.order = itertools.count()
        self.thread: threading.Thread | None = None

    def add(self, deadline: float, running: Watched, giving_up: bool = False) -> None:
        with self.condition:
            heapq.heappush(self.deadlines, (deadline, next(self.order), giving_up, running))
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name=self.name, daemon=True)
                self.thread.start()
            self.condition.notify()

    def ended(self) -> None:
        """Look at the deadlines again: a call ended, and its deadline may be the last."""
        with self.condition:
            self.condition.notify()

    def _watch(self) -> None:
        while True:
            with self.condition:
                while not self.deadlines or self.deadlines[0][0] > time.monotonic():
                    # Calls that ended need no watching.
                    self.deadlines = [entry for entry in self.deadlines if not entry[3].ended]
                    heapq.heapify(self.deadlines)
                    if not self.deadlines:
                        self.condition.wait(self.idle_exit)
                        if not self.deadlines:
                            self.thread = None  # the next deadline starts another
                            return
                        continue
                    self.condition.wait(self.deadlines[0][0] - time.monotonic())
                _deadline, _order, giving_up, running = heapq.heappop(self.deadlines)
            if giving_up:
                self.give_up(running)
            elif self.interrupt(running):
                self.add(time.monotonic() + STOP_WAIT, running, giving_up=True)


def raise_in(thread_id: int, exception: type[BaseException]) -> None:
    """Raise ``exception`` in the thread ``thread_id``, at the next line of Python it runs."""
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exception))


def clear_interruption(thread_id: int) -> None:
    """Take back an exception :func:`raise_in` raised that the thread has not seen yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)

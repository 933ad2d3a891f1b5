"""Run a process's background work on a daemon thread started on demand, ended when idle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class IdleExitThread:
    """Start ``body`` on a daemon thread when work comes, and let it end once idle.

    ``lock`` is the owner's lock (or condition) over the work: :meth:`start`,
    :meth:`keep_alive` and :meth:`end_if_idle` are called holding it, so that work handed
    over while the thread decides to end starts another one instead of being missed.
    """

    def __init__(
        self,
        body: Callable[[], None],
        *,
        name: str,
        lock: AbstractContextManager[Any],
        idle_exit: float,
    ) -> None:
        self.body = body
        self.name = name
        self.lock = lock
        self.idle_exit = idle_exit
        self.thread: threading.Thread | None = None
        self.last_busy = -float("inf")

    @property
    def running(self) -> bool:
        """Return whether a thread runs (or was started and has not ended yet)."""
        return self.thread is not None

    def start(self) -> bool:
        """Start the thread unless one runs; return whether it started one."""
        if self.thread is not None:
            return False
        self.last_busy = time.monotonic()
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        return True

    def keep_alive(self) -> None:
        """Note that the thread has work now: its idle time starts again."""
        self.last_busy = time.monotonic()

    def idle_left(self) -> float:
        """Return the seconds left before :meth:`end_if_idle` ends the thread."""
        return max(0.0, self.last_busy + self.idle_exit - time.monotonic())

    def end_if_idle(self) -> bool:
        """Return whether the thread has been idle ``idle_exit`` seconds.

        If so, the body must return, and the next :meth:`start` starts another
        thread."""
        if time.monotonic() - self.last_busy < self.idle_exit:
            return False
        self.thread = None
        return True

    def end_now(self) -> None:
        """Let the body end at once, busy or not: the next :meth:`start` starts another."""
        self.thread = None

    def _run(self) -> None:
        try:
            self.body()
        finally:
            with self.lock:  # also after an error: the next work starts another thread
                if self.thread is threading.current_thread():
                    self.thread = None

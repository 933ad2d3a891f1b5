"""The process's one listener for ``WORK`` (:class:`WorkBell`).

Every remote claim waiting for work shares it."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.db import connections

from django_ratequeue.engine.models import queue_db
from django_ratequeue.engine.wakeup import WORK, Waiter
from django_ratequeue.threads import IdleExitThread


@dataclass(eq=False)
class _Sleeper:
    """A claim waiting for work: the signals it had seen, and what wakes it.

    ``seen`` counts the signals as of when it last looked."""

    seen: int
    woken: threading.Event


class WorkBell:
    """Listen for ``WORK`` once per process, on behalf of every waiting claim.

    A waiting claim holds neither a database connection nor a thread of its own beyond
    its request's. The listening thread stops (closing its connection) when nobody waited
    for a while.

    A signal wakes the waiting claims one after the other, not all at once: it wakes the
    longest waiting one that has not looked since the signal, and each claim, once it has
    looked (:meth:`pass_on`), wakes the next. The first claim so looks alone, without
    the others' claims competing for the CPU and the rows, and every claim still looks
    once per signal (claims differ in queues and functions: what one leaves may be
    another's)."""

    IDLE_EXIT = 2.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rings = 0
        self.sleepers: list[_Sleeper] = []
        self.daemon = IdleExitThread(
            self._listen, name="ratequeue-bell", lock=self.lock, idle_exit=self.IDLE_EXIT
        )

    @property
    def thread(self) -> threading.Thread | None:
        """Return the listener's thread, or ``None`` when it is not running."""
        return self.daemon.thread

    def ring_count(self) -> int:
        """Return how many signals came so far: read it before looking for work.

        Pass it to :meth:`wait`: a signal that comes in between is not missed."""
        with self.lock:
            return self.rings

    def wait(self, seen: int, timeout: float) -> None:
        """Wait until woken for a ``WORK`` signal later than ``seen``, or ``timeout`` seconds."""
        sleeper = _Sleeper(seen, threading.Event())
        with self.lock:
            if self.rings != seen:  # signalled since it looked: look again
                return
            self.sleepers.append(sleeper)
            self._ensure_thread()
        try:
            sleeper.woken.wait(timeout)
        finally:
            with self.lock:
                if sleeper in self.sleepers:
                    self.sleepers.remove(sleeper)

    def pass_on(self) -> None:
        """Wake the next claim that has not looked for work since the last signal.

        A claim calls it once it has looked for work."""
        with self.lock:
            self._wake_next()

    def _wake_next(self) -> None:
        for sleeper in self.sleepers:
            if sleeper.seen != self.rings:
                self.sleepers.remove(sleeper)
                sleeper.woken.set()
                return

    def _ensure_thread(self) -> None:
        self.daemon.start()

    def _ring(self) -> None:
        with self.lock:
            self.rings += 1
            self._wake_next()

    def _listen(self) -> None:
        self._ring()  # what was signalled before it listened went unheard: look
        waiter = Waiter((WORK,))
        try:
            while True:
                if waiter.wait(0.5):
                    self._ring()
                with self.lock:
                    if self.sleepers:
                        self.daemon.keep_alive()
                    elif self.daemon.end_if_idle():
                        return
        finally:
            waiter.close()
            connections[queue_db()].close()


bell = WorkBell()

"""The one wake-up protocol: how the loop and the runners learn that there is work.

Three signals, ``LOOP``, ``WORK`` and ``JOBS``, raised in the transaction of their rows
(:func:`signal`: a ``NOTIFY`` on PostgreSQL), and a :class:`Waiter` that sleeps until one
it listens for comes or its timeout passes (on SQLite it polls ``PRAGMA data_version``).
docs/concepts.md ("One wake-up protocol") tells the signals and the whole state machine.
"""

from __future__ import annotations

import logging
import math
import select
import socket
import threading
import time
from contextlib import suppress
from datetime import datetime, timedelta
from typing import Any

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import LATEST
from django_ratequeue.engine.models import queue_connection

logger = logging.getLogger("django_ratequeue.queue")

LOOP = "ratequeue_loop"
WORK = "ratequeue_work"
JOBS = "ratequeue_jobs"


def lease_end(now: datetime) -> datetime:
    """Return when a lease taken or renewed at ``now`` lapses."""
    return now + timedelta(seconds=ratequeue_settings().LOOP_LEASE)


def segment_ceiling(moment: datetime) -> datetime:
    """Return ``moment`` rounded up to a SEGMENT boundary: work due close together, one step."""
    segment = ratequeue_settings().SEGMENT
    moment = min(moment, LATEST)  # a start at 23:59:59 on 31/12/9999 rounds to year 10000
    if segment <= 0:
        return moment
    stamp = math.ceil(moment.timestamp() / segment) * segment
    return datetime.fromtimestamp(stamp, tz=moment.tzinfo)


def notifies() -> bool:
    """Return whether the queue's database delivers signals (PostgreSQL) or waiters poll."""
    return queue_connection().vendor == "postgresql"


def signal(*channels: str) -> None:
    """Raise ``channels`` in one statement, in the current transaction or at once.

    In a transaction they are delivered at its commit; in autocommit at once. Nothing on
    SQLite, whose waiters poll."""
    connection = queue_connection()
    if connection.vendor != "postgresql" or not channels:
        return
    notifies = ", ".join(["pg_notify(%s, '')"] * len(channels))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {notifies}", list(channels))


def notify_clause(channel: str) -> str:
    """Return the SQL expression that raises ``channel``, for a statement's ``RETURNING``.

    The hot paths (an enqueue's INSERT, a runner's report) so signal without a round
    trip."""
    return f"pg_notify('{channel}', '')"


class Waiter:
    """Sleep until one of ``channels`` is signalled, a timeout, or an :meth:`interrupt`.

    The interrupt comes from another thread. One waiter per thread that waits; on
    PostgreSQL it listens on a connection of its own (so that waiting holds no transaction
    open, and the thread's Django connection stays free for its work).

    The payloads of the signals taken are kept for :meth:`received`, for a waiter that
    wants to know what changed (the event streams' watcher); the others ignore them."""

    def __init__(self, channels: tuple[str, ...], *, interruptible: bool = False) -> None:
        self.channels = channels
        self._listener: Any = None
        self._data_version: int | None = None
        self._payloads: set[str] | None = set()
        # Whether a signal may have come since the last took_signal(): one did, or one
        # may have been missed (a new listening connection, a lost one, SQLite's commits).
        self._signalled = True
        self._interrupted = threading.Event()
        # With ``interruptible``, a byte on this pair of sockets ends a wait early.
        self._wake: tuple[socket.socket, socket.socket] | None = None
        if interruptible:
            self._wake = socket.socketpair()
            self._wake[0].setblocking(False)
            self._wake[1].setblocking(False)

    def wait(self, timeout: float) -> bool:
        """Sleep at most ``timeout`` seconds; return whether something woke the waiter.

        True if a signal (or, on SQLite, another connection's commit) came, or
        :meth:`interrupt` was called, False if the time ran out. Signals that arrived while
        nobody waited are taken at once, all of them together."""
        timeout = max(timeout, 0.0)
        if not notifies():
            return self._poll(timeout)
        try:
            return self._listen(timeout)
        except Exception:
            logger.warning("Lost the connection that listens for signals", exc_info=True)
            self.close()
            self._payloads = None
            self._signalled = True
            time.sleep(min(timeout, 0.1))
            return True  # look for work: a signal may have been lost meanwhile

    def interrupt(self) -> None:
        """End the current (or the next) wait now.

        Called from another thread, on a waiter made ``interruptible``."""
        assert self._wake is not None, "this Waiter was not made interruptible"
        self._interrupted.set()
        with suppress(BlockingIOError):  # full: a wake is pending already
            self._wake[1].send(b"\0")

    def took_signal(self) -> bool:
        """Return whether a signal came (or may have been missed) since the last call.

        An interrupt alone is none."""
        signalled, self._signalled = self._signalled, False
        return signalled

    def received(self) -> set[str] | None:
        """Return the payloads of the signals taken since the last call.

        ``None`` when what changed is unknown (SQLite's commits carry none; a signal may
        have been missed while the listening connection was opened again)."""
        payloads, self._payloads = self._payloads, set()
        return payloads

    def _listen(self, timeout: float) -> bool:
        if self._listener is None:
            wrapper = queue_connection()
            listener = wrapper.get_new_connection(wrapper.get_connection_params())
            listener.autocommit = True
            for channel in self.channels:
                listener.execute(f"LISTEN {channel}")
            self._listener = listener
            self._payloads = None
            self._signalled = True
            return True  # anything signalled before we listened went unheard: look now
        # Signals read along with an earlier command wait in libpq, not on the socket.
        if self._drain() | self._took_interrupt():
            return True
        sockets = [self._listener.pgconn.socket]
        if self._wake is not None:
            sockets.append(self._wake[0])
        select.select(sockets, [], [], timeout)
        return self._drain() | self._took_interrupt()

    def _drain(self) -> bool:
        """Take the signals already received; return whether there was one.

        The one wake covers them all: whatever the socket holds now, read without waiting
        (libpq's ``PQconsumeInput``, which raises when the connection was lost)."""
        pgconn = self._listener.pgconn
        pgconn.consume_input()
        got = False
        while (notify := pgconn.notifies()) is not None:
            got = self._signalled = True
            if self._payloads is not None:
                self._payloads.add(notify.extra.decode())
            pgconn.consume_input()
        return got

    def _took_interrupt(self) -> bool:
        """Return whether :meth:`interrupt` was called since the last look, and forget it."""
        if self._wake is None:
            return False
        with suppress(BlockingIOError):
            while self._wake[0].recv(64):
                pass
        interrupted = self._interrupted.is_set()
        self._interrupted.clear()
        return interrupted

    def _poll(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        interval = ratequeue_settings().POLL_INTERVAL
        while True:
            version = self._read_data_version()
            if self._data_version is not None and version != self._data_version:
                self._data_version = version
                self._payloads = None
                self._signalled = True
                return True
            self._data_version = version
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._interrupted.wait(min(interval, left)) and self._took_interrupt():
                return True

    def _read_data_version(self) -> int:
        with queue_connection().cursor() as cursor:
            cursor.execute("PRAGMA data_version")
            (version,) = cursor.fetchone()
        return int(version)

    def close(self) -> None:
        """Close the listening connection (the next wait opens another)."""
        if self._listener is not None:
            with suppress(Exception):  # already broken: nothing to release
                self._listener.close()
            self._listener = None

    def release(self) -> None:
        """Close the listening connection and the interrupt's sockets, for good."""
        self.close()
        if self._wake is not None:
            for end in self._wake:
                end.close()
            self._wake = None

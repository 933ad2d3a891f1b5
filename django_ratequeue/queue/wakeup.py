"""The one wake-up protocol: how the loop and the runners learn that there is work.

There are two signals. ``LOOP`` means the loop has something to look at: a job enqueued,
a cancel requested, an attempt ended, a subtask wait asking for its slots back, a limit
changed. ``WORK`` means attempts were dispatched and wait for a runner. Whoever causes
one raises it in the same transaction as its rows (:func:`signal`). On PostgreSQL a
signal is a ``NOTIFY``: delivered at commit, dropped on rollback, so it never arrives
before its rows can be read. A :class:`Waiter` sleeps until a signal it listens for
arrives or its timeout passes, whichever comes first. SQLite has no notifications: its
waiters poll ``PRAGMA data_version`` every ``POLL_INTERVAL`` (it changes whenever another
connection commits), a read that costs microseconds.

A signal can be lost (a waiter's connection cut and opened again); so nothing waits
without a timeout, and a waiter that times out looks for work as if signalled. The loop's
leader wakes at least every ``WATCHDOG_INTERVAL`` to renew its lease, runners every
``POLL_INTERVAL``. docs/concepts.md ("One wake-up protocol") tells the whole state machine.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import suppress
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.db import transaction

from ..conf import ratequeue_settings
from .bounds import LATEST
from .models import queue_connection, queue_db

logger = logging.getLogger("django_ratequeue.queue")

LOOP = "ratequeue_loop"
WORK = "ratequeue_work"

# The django-q2 task that serves the queue on a worker, by path (nothing here imports it).
SERVE_TASK = "django_ratequeue.queue.runner.serve"


def lease_end(now: datetime) -> datetime:
    """When a lease taken or renewed at ``now`` lapses."""
    return now + timedelta(seconds=ratequeue_settings().LOOP_LEASE)


def segment_ceiling(moment: datetime) -> datetime:
    """``moment`` rounded up to a SEGMENT boundary: work due close together, one step."""
    segment = ratequeue_settings().SEGMENT
    moment = min(moment, LATEST)  # a start at 23:59:59 on 31/12/9999 rounds to year 10000
    if segment <= 0:
        return moment
    stamp = math.ceil(moment.timestamp() / segment) * segment
    return datetime.fromtimestamp(stamp, tz=moment.tzinfo)


def notifies() -> bool:
    """Whether the queue's database delivers signals (PostgreSQL) or waiters poll."""
    return queue_connection().vendor == "postgresql"


def signal(channel: str) -> None:
    """Raise ``channel`` in the current transaction (delivered at its commit), or at once
    in autocommit. Nothing on SQLite, whose waiters poll."""
    connection = queue_connection()
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [channel])


def request_runners(count: int) -> None:
    """Ask django-q2 for up to ``count`` runners (:data:`SERVE_TASK`), less the tasks
    already waiting in its broker (runners asked for earlier, that no worker took yet).
    With the ORM broker the tasks are written in the caller's transaction, so they exist
    exactly when the attempts they are for do; with other brokers, after its commit."""
    from django_q.conf import Conf
    from django_q.tasks import async_task

    count -= _broker().queue_size() or 0
    # No django-q2 timeout: a runner bounds its own turn, and each job its own time.
    options: dict[str, Any] = {"save": False, "timeout": -1}
    for _ in range(max(count, 0)):
        if Conf.ORM:
            async_task(SERVE_TASK, q_options=options)
        else:
            transaction.on_commit(
                lambda: async_task(SERVE_TASK, q_options=options), using=queue_db()
            )


@cache
def _broker() -> Any:
    from django_q.brokers import get_broker

    return get_broker()


def notify_clause(channel: str) -> str:
    """The SQL expression that raises ``channel``, for a statement's ``RETURNING``: the
    hot paths (an enqueue's INSERT, a runner's report) signal without a round trip."""
    return f"pg_notify('{channel}', '')"


class Waiter:
    """Sleeps until one of ``channels`` is signalled, or a timeout. One per thread that
    waits; on PostgreSQL it listens on a connection of its own (so that waiting holds no
    transaction open, and the thread's Django connection stays free for its work)."""

    def __init__(self, channels: tuple[str, ...]) -> None:
        self.channels = channels
        self._listener: Any = None
        self._data_version: int | None = None

    def wait(self, timeout: float) -> bool:
        """Sleep at most ``timeout`` seconds; True if a signal (or, on SQLite, another
        connection's commit) came, False if the time ran out. Signals that arrived while
        nobody waited are taken at once, all of them together."""
        timeout = max(timeout, 0.0)
        if not notifies():
            return self._poll(timeout)
        try:
            return self._listen(timeout)
        except Exception:
            logger.warning("Lost the connection that listens for signals", exc_info=True)
            self.close()
            time.sleep(min(timeout, 0.1))
            return True  # look for work: a signal may have been lost meanwhile

    def _listen(self, timeout: float) -> bool:
        if self._listener is None:
            wrapper = queue_connection()
            listener = wrapper.get_new_connection(wrapper.get_connection_params())
            listener.autocommit = True
            for channel in self.channels:
                listener.execute(f"LISTEN {channel}")
            self._listener = listener
            return True  # anything signalled before we listened went unheard: look now
        got = False
        for _notify in self._listener.notifies(timeout=timeout, stop_after=1):
            got = True
        if got:
            self._drain()
        return got

    def _drain(self) -> None:
        """Take the signals already received (the one wake covers them): whatever the
        socket holds now, read without waiting (libpq's ``PQconsumeInput``)."""
        pgconn = self._listener.pgconn
        pgconn.consume_input()
        while pgconn.notifies() is not None:
            pgconn.consume_input()

    def _poll(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        interval = ratequeue_settings().POLL_INTERVAL
        while True:
            version = self._read_data_version()
            if self._data_version is not None and version != self._data_version:
                self._data_version = version
                return True
            self._data_version = version
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(interval, left))

    def _read_data_version(self) -> int:
        with queue_connection().cursor() as cursor:
            cursor.execute("PRAGMA data_version")
            (version,) = cursor.fetchone()
        return int(version)

    def close(self) -> None:
        if self._listener is not None:
            with suppress(Exception):  # already broken: nothing to release
                self._listener.close()
            self._listener = None

"""Heartbeats and the watchdog: one daemon thread in every django-q2 worker process.

django-q2 sends ``post_spawn`` in each worker process it starts. There we start a thread that
every ``WATCHDOG_INTERVAL`` seconds refreshes this process's heartbeat (at most every
``HEARTBEAT_INTERVAL``) and asks :func:`~.loop.watch_loop` to restart a loop whose lease
lapsed or wake one whose ``next_wake_at`` passed. The loop treats an attempt whose worker's
heartbeat is older than ``WORKER_DEAD_AFTER`` as lost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from django.db import close_old_connections, connection
from django.dispatch import receiver
from django.utils import timezone
from django_q.signals import post_spawn

from ..conf import ratequeue_settings
from .models import WorkerHeartbeat

logger = logging.getLogger("django_ratequeue.queue")

_identity: tuple[int, str] | None = None
_last_beat = 0.0
_beat_lock = threading.Lock()


def worker_id() -> str:
    """This process's worker id (new after a fork)."""
    global _identity
    if _identity is None or _identity[0] != os.getpid():
        _identity = (os.getpid(), uuid.uuid4().hex)
    return _identity[1]


def beat(force: bool = False) -> str:
    """Record that this process is alive, unless it did so less than HEARTBEAT_INTERVAL ago."""
    global _last_beat
    identity = worker_id()
    with _beat_lock:
        if (
            not force
            and time.monotonic() - _last_beat < ratequeue_settings()["HEARTBEAT_INTERVAL"]
        ):
            return identity
        _last_beat = time.monotonic()
    now = timezone.now()
    if not WorkerHeartbeat.objects.filter(pk=identity).update(seen_at=now):
        WorkerHeartbeat.objects.bulk_create(
            [
                WorkerHeartbeat(
                    id=identity, pid=os.getpid(), host=socket.gethostname(), seen_at=now
                )
            ],
            ignore_conflicts=True,
        )
    return identity


def watch() -> None:
    """The watchdog thread's body."""
    from .loop import wake_loop, watch_loop

    interval = ratequeue_settings()["WATCHDOG_INTERVAL"]
    first = True
    while True:
        try:
            close_old_connections()
            beat(force=first)
            if first:
                # A new worker: look once for work left by a previous cluster.
                wake_loop()
                first = False
            watch_loop()
        except Exception:
            logger.exception("ratequeue watchdog check failed")
            connection.close()
        time.sleep(interval)


@receiver(post_spawn)
def start_watchdog(sender: Any = None, **kwargs: Any) -> None:
    threading.Thread(target=watch, name="ratequeue-watchdog", daemon=True).start()

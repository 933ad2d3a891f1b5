"""Proof of life of a django-q2 worker process: its id, and the heartbeat row its agent
refreshes (:mod:`.agent`). The loop takes an attempt whose worker's heartbeat is older
than ``WORKER_DEAD_AFTER`` for lost, and counts the live workers serving the queue."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from datetime import timedelta

from .. import clock
from ..conf import ratequeue_settings
from .models import WorkerHeartbeat

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
        if not force and time.monotonic() - _last_beat < ratequeue_settings().HEARTBEAT_INTERVAL:
            return identity
        _last_beat = time.monotonic()
    now = clock.now()
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


def mark_serving(identity: str, serving: bool) -> None:
    """Say whether a runner serves the queue in this worker process now."""
    WorkerHeartbeat.objects.filter(pk=identity).update(serving=serving)


def any_alive() -> bool:
    """Say whether any django-q2 worker process has recorded that it is alive within
    ``WORKER_DEAD_AFTER`` (the loop's own test for a dead worker)."""
    dead_after = timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER)
    return WorkerHeartbeat.objects.filter(seen_at__gte=clock.now() - dead_after).exists()

"""Heartbeats and the watchdog: one daemon thread in every django-q2 worker process.

django-q2 sends ``post_spawn`` in each worker process it starts. There we start a thread that
every ``WATCHDOG_INTERVAL`` seconds refreshes this process's heartbeat (at most every
``HEARTBEAT_INTERVAL``) and asks :func:`watch_loop` to wake a loop whose
``next_wake_at`` passed or to run a pass that does not progress (its process died, or its
django-q2 task waits behind busy workers) in this thread. Every ``FORGOTTEN_WORK_CHECKS``
intervals it also looks for work a resting loop was not told about
(:func:`wake_forgotten_work`). The loop treats an attempt whose worker's heartbeat is older
than ``WORKER_DEAD_AFTER`` as lost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections
from django.dispatch import receiver
from django_q.signals import post_spawn

from .. import clock
from ..conf import ratequeue_settings
from .loop import take_pass
from .models import Job, LoopState, LoopStatus, Status, WorkerHeartbeat, queue_connection
from .wakeup import ensure_loop_state, lease_end, start_pass, wake_loop

# Every how many watchdog intervals to look for work that a resting loop was not told about.
FORGOTTEN_WORK_CHECKS = 4
# How far before the loop's last step a job created by a producer's clock may be that the
# step did not see: clock skew between hosts and a producer's time from stamp to commit.
STAMP_MARGIN = timedelta(seconds=1)

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


def wake_forgotten_work() -> None:
    """Kick a resting loop that has WAITING jobs it was not told about.

    An enqueue skips its kick when its process saw the loop running a moment ago (see
    :mod:`.enqueue`); if the pass rested just before the job committed, this finds the job:
    an idle loop has no WAITING job at all, and a scheduled one none created (by the time
    ordered ids of the hot path) after its last step, so both reads are short index probes.
    """
    row = LoopState.objects.filter(pk=LoopState.SINGLETON).values_list("state", "updated_at")
    state, last_step = next(iter(row), (LoopStatus.IDLE, None))
    waiting = Job.objects.filter(status=Status.WAITING)
    if state == LoopStatus.SCHEDULED and last_step is not None:
        segment = timedelta(seconds=ratequeue_settings().SEGMENT)
        since = last_step - 2 * segment - STAMP_MARGIN
        until = clock.now() + STAMP_MARGIN
        waiting = waiting.filter(pk__range=(_id_prefix(since), _id_prefix(until)))
    elif state != LoopStatus.IDLE:
        return
    if waiting.exists():
        wake_loop()


def _id_prefix(moment: datetime) -> str:
    """The smallest job id :func:`~.models.new_job_id` gives at ``moment``."""
    return f"{int(moment.timestamp() * 1_000_000):013x}"


def watch_loop() -> datetime | None:
    """The watchdog's check: run a pass that does not progress (its process died, or its
    task waits behind busy workers) right here; wake a resting loop whose time came.

    Returns when a resting loop wants waking next, so that the watchdog can sleep until
    then rather than a whole interval: scheduled starts and reserved rate-limit times are
    then met within a broker hand-off, not within a watchdog interval."""
    generation, state, next_wake_at, expires = ensure_loop_state()
    now = clock.now()
    if state == LoopStatus.RUNNING:
        grace = timedelta(seconds=2 * ratequeue_settings().WATCHDOG_INTERVAL)
        # Not renewed for ``grace``: it was renewed last before now - grace.
        if expires is None or expires < lease_end(now - grace):
            if expires is None or expires < now:
                logger.warning("Main loop lease lapsed (generation %s); taking over", generation)
            loop = take_pass(generation)
            if loop is not None:
                loop.run(in_watchdog=True)
    elif state != LoopStatus.IDLE and next_wake_at is not None:
        if next_wake_at <= now:
            start_pass(generation, state=state)
        else:
            return next_wake_at
    return None


def watch() -> None:
    """The watchdog thread's body."""
    interval = ratequeue_settings().WATCHDOG_INTERVAL
    first = True
    rounds = 0
    while True:
        try:
            close_old_connections()
            beat(force=first)
            if first:
                # A new worker: look once for work left by a previous cluster.
                wake_loop()
                first = False
            next_wake_at = watch_loop()
            rounds += 1
            if rounds % FORGOTTEN_WORK_CHECKS == 0:
                wake_forgotten_work()
        except Exception:
            logger.exception("ratequeue watchdog check failed")
            queue_connection().close()
            next_wake_at = None
        pause = interval
        if next_wake_at is not None:
            pause = min(pause, max((next_wake_at - clock.now()).total_seconds(), 0.001))
        time.sleep(pause)


@receiver(post_spawn)
def start_watchdog(sender: Any = None, **kwargs: Any) -> None:
    threading.Thread(target=watch, name="ratequeue-watchdog", daemon=True).start()

"""Proof of life of a django-q2 worker process: its id, and its heartbeat row.

Its agent refreshes the row (:mod:`.agent`). The loop takes an attempt whose worker's
heartbeat is older than ``WORKER_DEAD_AFTER`` for lost, and counts the live workers
serving the queue. The row also says which job functions the process knows: a job that
no live worker knows waits for one that does (:func:`live_functions`)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.models import WorkerHeartbeat
from django_ratequeue.engine.registry import known_paths
from django_ratequeue.engine.workerkeys import remote_worker_seen

_identity: tuple[int, str] | None = None
_last_beat = 0.0
# The functions this process's row says it knows, as last written.
_declared: tuple[str, ...] | None = None
_beat_lock = threading.Lock()
_identity_lock = threading.Lock()


def _after_fork() -> None:
    """Give a forked child locks of its own: a thread of the parent may have held one."""
    global _beat_lock, _identity_lock
    _beat_lock, _identity_lock = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def worker_id() -> str:
    """Return this process's worker id (new after a fork), the same for all its threads.

    Its agent and its runner start together and must beat as one worker."""
    global _identity
    with _identity_lock:
        if _identity is None or _identity[0] != os.getpid():
            _identity = (os.getpid(), uuid.uuid4().hex)
        return _identity[1]


def beat(force: bool = False) -> str:
    """Record that this process is alive, unless it did so less than HEARTBEAT_INTERVAL ago.

    A forced beat, and the first after a registration, also says which functions the
    process knows."""
    global _last_beat, _declared
    identity = worker_id()
    with _beat_lock:
        if not force and time.monotonic() - _last_beat < ratequeue_settings().HEARTBEAT_INTERVAL:
            return identity
        _last_beat = time.monotonic()
    now = clock.now()
    known = known_paths()
    fields: dict[str, object] = {"seen_at": now}
    if force or known is not _declared:
        fields["functions"] = list(known)
    if not WorkerHeartbeat.objects.filter(pk=identity).update(**fields):
        row = WorkerHeartbeat(id=identity, pid=os.getpid(), host=socket.gethostname(), seen_at=now)
        row.functions = list(known)
        WorkerHeartbeat.objects.bulk_create([row], ignore_conflicts=True)
    _declared = known
    return identity


@dataclass(frozen=True)
class LiveWorker:
    """What a live worker process's heartbeat says: the job functions it knows, and the
    slots of its serving runner (0: none serves, or not known)."""

    functions: frozenset[str]
    slots: int


def live_workers(now: datetime, serving: bool = False) -> dict[str, LiveWorker]:
    """Return what each live worker process's heartbeat says, by its worker id.

    Live is within ``WORKER_DEAD_AFTER``, the loop's own test for a dead worker; with
    ``serving``, only the processes whose runner serves the queue now."""
    dead_after = timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER)
    rows = WorkerHeartbeat.objects.filter(seen_at__gte=now - dead_after)
    if serving:
        rows = rows.filter(serving=True)
    return {
        identity: LiveWorker(declared(functions), slots)
        for identity, functions, slots in rows.values_list("id", "functions", "slots")
    }


def live_functions(now: datetime) -> dict[str, frozenset[str]]:
    """Return the job functions each live worker process knows, by its worker id."""
    return {identity: worker.functions for identity, worker in live_workers(now).items()}


def declared(functions: object) -> frozenset[str]:
    """Return the functions a heartbeat row's ``functions`` says its process knows."""
    if not isinstance(functions, list):
        return frozenset()
    return frozenset(f for f in functions if isinstance(f, str))


def take_over_gone_here() -> int:
    """Mark dead now the workers of this host whose process is gone; return how many.

    Such a worker is left by a cluster restarted after a crash: recovery then takes its
    attempts at once rather than ``WORKER_DEAD_AFTER`` later (the caller signals the loop).

    A worker is gone when its heartbeat is late (older than ``HEARTBEAT_INTERVAL``: a
    live one never is, whatever this host can see of it) and no process with its pid has
    run here since that heartbeat (none has that pid, or the one that has started later)."""
    settings = ratequeue_settings()
    now = clock.now()
    late = WorkerHeartbeat.objects.filter(
        host=socket.gethostname(),
        seen_at__lt=now - timedelta(seconds=settings.HEARTBEAT_INTERVAL),
        seen_at__gte=now - timedelta(seconds=settings.WORKER_DEAD_AFTER),
    ).exclude(pid=os.getpid())
    offset = now.timestamp() - time.time()  # the queue's clock ahead of this host's
    gone = [
        identity
        for identity, pid, seen_at in late.values_list("id", "pid", "seen_at")
        if not _ran_since(pid, seen_at.timestamp() - offset)
    ]
    if gone:
        dead = now - timedelta(seconds=settings.WORKER_DEAD_AFTER + 1)
        WorkerHeartbeat.objects.filter(pk__in=gone).update(seen_at=dead)
    return len(gone)


def _ran_since(pid: int, moment: float) -> bool:
    """Return whether the process ``pid`` of this host has run since ``moment``.

    ``moment`` is in epoch seconds; the process has run when it exists and (where /proc
    tells) it started before then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, StopIteration, ValueError):
        return True  # no /proc: it exists, so take it for the same process
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started < moment


def mark_serving(identity: str, slots: int) -> None:
    """Say that a runner of ``slots`` slots serves the queue in this worker process now.

    0: none serves (its runner stopped)."""
    WorkerHeartbeat.objects.filter(pk=identity).update(serving=slots > 0, slots=slots)


def any_alive() -> bool:
    """Say whether any django-q2 worker process recorded lately that it is alive.

    Lately is within ``WORKER_DEAD_AFTER``, the loop's own test for a dead worker."""
    dead_after = timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER)
    return WorkerHeartbeat.objects.filter(seen_at__gte=clock.now() - dead_after).exists()


def queue_served(queue: str) -> bool:
    """Say whether a worker that runs ``queue``'s jobs is alive (:func:`served_queues`)."""
    return queue in served_queues([queue])


def served_queues(queues: Iterable[str]) -> set[str]:
    """Return those of ``queues`` a live worker runs the jobs of.

    A remote queue's: a remote worker whose key claims from it was seen lately; any
    other's: a django-q2 worker process (:func:`any_alive`)."""
    queues, configs = list(queues), ratequeue_settings().QUEUES
    remote = {q for q in queues if (c := configs.get(q)) is not None and c.remote}
    local = set(queues) - remote
    served = {q for q in remote if remote_worker_seen(q)}
    if local and any_alive():
        served |= local
    return served

"""What the queues hold right now, for people: the admin, ``ratequeue_status`` and the demo.

Read-only and cheap enough to poll: one ``GROUP BY queue, status`` over the jobs, a point
read of the loop's singleton and the live workers' heartbeats. Decisions never come from
here; the loop keeps its own counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max

from .. import clock
from ..conf import ratequeue_settings
from .enqueue import DEFAULT_QUEUE
from .loop import QueueLimits, queue_overrides
from .models import Job, LoopState, LoopStatus, Status, WorkerHeartbeat


@dataclass(frozen=True)
class QueueCounts:
    """One queue's jobs by status and the limit the loop applies to it.

    ``limit_note`` says where an unusual limit comes from: "paused" (in settings), "paused
    at runtime", "set at runtime" (see :mod:`.control`), "MAX_CONCURRENCY" (the default
    queue when not configured), "set at enqueue" or "not configured" (then 1).
    """

    name: str
    limit: int
    limit_note: str
    counts: dict[str, int]

    @property
    def limit_label(self) -> str:
        if self.limit_note.startswith("paused"):
            return self.limit_note
        return f"{self.limit} ({self.limit_note})" if self.limit_note else str(self.limit)


@dataclass(frozen=True)
class LoopInfo:
    state: str
    generation: int
    lease_expires_at: datetime | None
    next_wake_at: datetime | None
    updated_at: datetime | None

    @property
    def lease_lapsed(self) -> bool:
        """A running loop whose lease ran out: its process died; the watchdog restarts it."""
        return self.state == LoopStatus.RUNNING and (
            self.lease_expires_at is None or self.lease_expires_at < clock.now()
        )


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    seen_at: datetime


@dataclass(frozen=True)
class QueueOverview:
    queues: list[QueueCounts]
    loop: LoopInfo
    workers: list[WorkerInfo]

    @property
    def totals(self) -> dict[str, int]:
        return {s: sum(q.counts[s] for q in self.queues) for s in Status.values}

    def as_json(self) -> dict[str, Any]:
        """Plain data (ISO-8601 times) for ``--json`` and the demo's endpoint."""

        def iso(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        return {
            "queues": [
                {
                    "name": q.name,
                    "limit": q.limit,
                    "limit_note": q.limit_note,
                    "limit_label": q.limit_label,
                    "counts": q.counts,
                }
                for q in self.queues
            ],
            "totals": self.totals,
            "loop": {
                "state": self.loop.state,
                "generation": self.loop.generation,
                "lease_expires_at": iso(self.loop.lease_expires_at),
                "lease_lapsed": self.loop.lease_lapsed,
                "next_wake_at": iso(self.loop.next_wake_at),
                "updated_at": iso(self.loop.updated_at),
            },
            "workers": [
                {"id": w.id, "host": w.host, "pid": w.pid, "seen_at": iso(w.seen_at)}
                for w in self.workers
            ],
        }


def _limit(name: str, limits: QueueLimits, set_at_enqueue: int | None) -> tuple[int, str]:
    """The queue's limit as the loop applies it (see ``QueueLimits``), and where it is from."""
    at_runtime = limits.source == "runtime"
    if limits.max_concurrency == 0:
        return 0, "paused at runtime" if at_runtime else "paused"
    if limits.max_concurrency is not None:
        if at_runtime:
            return limits.max_concurrency, "set at runtime"
        configured = name in ratequeue_settings()["QUEUES"]
        return limits.max_concurrency, "" if configured else "MAX_CONCURRENCY"
    note = "not configured" if set_at_enqueue is None else "set at enqueue"
    return limits.limit_for(set_at_enqueue), note


def queue_overview() -> QueueOverview:
    """Every configured queue and every queue that has jobs, with the loop and its workers."""
    settings = ratequeue_settings()
    counts = {
        name: dict.fromkeys(Status.values, 0) for name in [DEFAULT_QUEUE, *settings["QUEUES"]]
    }
    # Unconfigured queues take the max_concurrency their jobs were enqueued with.
    set_at_enqueue: dict[str, int] = {}
    rows = (
        Job.objects.values_list("queue", "status")
        .annotate(jobs=Count("pk"), max_concurrency=Max("max_concurrency"))
        .order_by()
    )
    for queue, status, jobs, max_concurrency in rows:
        counts.setdefault(queue, dict.fromkeys(Status.values, 0))[status] = jobs
        if max_concurrency is not None:
            set_at_enqueue[queue] = max(max_concurrency, set_at_enqueue.get(queue, 0))
    overrides = queue_overrides()
    for name in overrides:
        counts.setdefault(name, dict.fromkeys(Status.values, 0))
    queues = [
        QueueCounts(
            name,
            *_limit(name, QueueLimits.of(name, overrides), set_at_enqueue.get(name)),
            counts[name],
        )
        for name in sorted(counts)
    ]
    state = LoopState.objects.filter(pk=LoopState.SINGLETON).first() or LoopState()
    loop = LoopInfo(
        state=state.state,
        generation=state.generation,
        lease_expires_at=state.lease_expires_at,
        next_wake_at=state.next_wake_at,
        updated_at=state.updated_at,
    )
    live_since = clock.now() - timedelta(seconds=settings["WORKER_DEAD_AFTER"])
    workers = [
        WorkerInfo(id=w.id, host=w.host, pid=w.pid, seen_at=w.seen_at)
        for w in WorkerHeartbeat.objects.filter(seen_at__gte=live_since).order_by("host", "pid")
    ]
    return QueueOverview(queues=queues, loop=loop, workers=workers)

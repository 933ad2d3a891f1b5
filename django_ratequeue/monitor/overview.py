"""Read the queues' counts, the main loop and its workers, for people to see.

For the admin, ``ratequeue_status`` and the demo (docs/concepts.md, "What people
see")."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_ratequeue import clock
from django_ratequeue.jobs import Status
from django_ratequeue.models import LoopState
from django_ratequeue.monitor import counts
from django_ratequeue.monitor.counts import COLUMNS, COUNT_LIMIT, QueueCounts, queue_counts
from django_ratequeue.monitor.workers import (
    NoWorker,
    RemoteWorker,
    Worker,
    live_workers,
    no_worker,
    remote_workers,
)


@dataclass(frozen=True)
class LoopInfo:
    """The main loop's singleton as last written: its state, lease and leader."""

    state: str
    generation: int
    lease_expires_at: datetime | None
    next_wake_at: datetime | None
    updated_at: datetime | None
    leader: str

    @property
    def lease_lapsed(self) -> bool:
        """Say whether the lease ran out: its leader died; a follower takes over."""
        return self.lease_expires_at is not None and self.lease_expires_at < clock.now()


@dataclass(frozen=True)
class QueueOverview:
    """Every queue's counts, the main loop, and the live workers, local and remote."""

    queues: list[QueueCounts]
    loop: LoopInfo
    workers: list[Worker]
    remote_workers: list[RemoteWorker] = field(default_factory=list)
    # The workers missing (false when none is).
    no_worker: NoWorker = field(default_factory=lambda: NoWorker(local=False, remote_queues=[]))
    # Where counts stop (COUNT_LIMIT when read).
    count_limit: int = COUNT_LIMIT

    @property
    def totals(self) -> dict[str, int]:
        """Return each column's count summed over the queues."""
        return {c: sum(q.counts[c] for q in self.queues) for c, _label in COLUMNS}

    @property
    def totals_capped(self) -> frozenset[str]:
        """Return the columns whose total is a lower bound (some queue's count is capped)."""
        return frozenset().union(*(q.capped for q in self.queues))

    def as_json(self) -> dict[str, Any]:
        """Return plain data (ISO-8601 times) for ``--json`` and the demo's endpoint."""
        return {
            "queues": [
                {
                    "name": q.name,
                    "limit": q.limit,
                    "limit_note": q.limit_note,
                    "limit_label": q.limit_label,
                    "counts": q.counts,
                    "capped": sorted(q.capped),
                }
                for q in self.queues
            ],
            "totals": self.totals,
            "totals_capped": sorted(self.totals_capped),
            "count_limit": self.count_limit,
            "loop": {
                "state": self.loop.state,
                "generation": self.loop.generation,
                "lease_expires_at": _iso(self.loop.lease_expires_at),
                "lease_lapsed": self.loop.lease_lapsed,
                "leader": self.loop.leader,
                "next_wake_at": _iso(self.loop.next_wake_at),
                "updated_at": _iso(self.loop.updated_at),
            },
            "workers": [_worker_json(w) for w in self.workers],
            "remote_workers": [_remote_json(r) for r in self.remote_workers],
            "no_worker": {
                "local": self.no_worker.local,
                "remote_queues": self.no_worker.remote_queues,
            },
        }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _worker_json(worker: Worker) -> dict[str, Any]:
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "seen_at": _iso(worker.seen_at),
        "serving": worker.serving,
        "slots": worker.slots,
        "leads": worker.leads,
    }


def _remote_json(remote: RemoteWorker) -> dict[str, Any]:
    return {
        "key": remote.key,
        "prefix": remote.prefix,
        "queues": remote.queues,
        "host": remote.host,
        "last_seen": _iso(remote.last_seen),
        "running": remote.running,
        "instances": remote.instances,
    }


def loop_info() -> LoopInfo:
    """Return the main loop's singleton (its defaults before the loop's first step)."""
    state = LoopState.objects.filter(pk=LoopState.SINGLETON).first() or LoopState()
    return LoopInfo(
        state=state.state,
        generation=state.generation,
        lease_expires_at=state.lease_expires_at,
        next_wake_at=state.next_wake_at,
        updated_at=state.updated_at,
        leader=state.leader,
    )


def queue_overview(statuses: Collection[str] = Status.values) -> QueueOverview:
    """Return every queue configured or with jobs, with the loop and its workers.

    The queues' jobs in ``statuses`` are counted (see :func:`.counts.queue_counts`)."""
    queues = queue_counts(statuses)
    loop = loop_info()
    workers = live_workers("" if loop.lease_lapsed else loop.leader)
    waiting = [q.name for q in queues if q.counts[Status.WAITING]]
    return QueueOverview(
        queues=queues,
        loop=loop,
        workers=workers,
        remote_workers=remote_workers(),
        no_worker=no_worker(alive=bool(workers), waiting=waiting),
        count_limit=counts.COUNT_LIMIT,  # read now: tests lower it
    )

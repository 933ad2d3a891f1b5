"""What the queues hold right now, for people: the admin, ``ratequeue_status`` and the demo.

Read-only and cheap enough to poll, however much history the table keeps: per status, the
queues that have jobs in it are found by skipping through the dispatch index (one probe
per queue) and each count stops at ``COUNT_LIMIT`` (an index-only scan of at most that many
entries), so the cost follows the number of queues, not the number of finished jobs. Then
a read of the active attempts (few: at most ``MAX_CONCURRENCY``) to tell jobs dispatched to
a worker from jobs a worker has started, a point read of the loop's singleton and the live
workers' heartbeats. Decisions never come from here; the loop keeps its own counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count

from .. import clock
from ..conf import ratequeue_settings
from .keys import ready_order
from .limits import QueueLimits, queue_overrides
from .models import (
    Attempt,
    Job,
    LoopState,
    Status,
    WorkerHeartbeat,
    WorkerKey,
    queue_connection,
)
from .options import DEFAULT_QUEUE
from .workerkeys import running_per_instance

# Counts stop here and show as "10000+": counting further would read the whole history.
COUNT_LIMIT = 10_000
# The columns shown, in order: the job statuses, with RUNNING split into the jobs handed
# to a worker that has not started them yet ("dispatched") and the ones really running.
COLUMNS: list[tuple[str, str]] = [
    (Status.SCHEDULED, "Scheduled"),
    (Status.WAITING, "Waiting"),
    ("dispatched", "Dispatched"),
    (Status.RUNNING, "Running"),
    (Status.RETRYING, "Retrying"),
    (Status.FAILED, "Failed"),
    (Status.COMPLETE, "Complete"),
    (Status.CANCELED, "Canceled"),
]


def column_status(column: str) -> str:
    """The job status a column's jobs are in (to filter the job list by it)."""
    return Status.RUNNING if column == "dispatched" else column


def _empty_counts() -> dict[str, int]:
    return {column: 0 for column, _label in COLUMNS}


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
    # The columns whose count reached COUNT_LIMIT: there are at least that many.
    capped: frozenset[str] = frozenset()

    def shown(self, column: str) -> str:
        """A count for people: ``"10000+"`` once it reached COUNT_LIMIT."""
        return f"{self.counts[column]}+" if column in self.capped else str(self.counts[column])

    @property
    def cells(self) -> list[tuple[str, str, int, str]]:
        """(column, job status to filter by, count, count shown) for each column."""
        return [
            (column, column_status(column), self.counts[column], self.shown(column))
            for column, _label in COLUMNS
        ]

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
    leader: str

    @property
    def lease_lapsed(self) -> bool:
        """A lease that ran out: its leader died; a follower takes over."""
        return self.lease_expires_at is not None and self.lease_expires_at < clock.now()


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    seen_at: datetime
    serving: bool  # a runner serves the queue in it now
    leads: bool  # its agent leads the loop


@dataclass(frozen=True)
class RemoteWorkerInfo:
    """The remote workers of one key (not revoked): where and when it was last used, and
    the worker instances that hold attempts now, with how many each."""

    key: str  # its name
    prefix: str
    queues: list[str]
    host: str
    last_seen: datetime | None
    instances: dict[str, int]

    @property
    def running(self) -> int:
        return sum(self.instances.values())


@dataclass(frozen=True)
class QueueOverview:
    queues: list[QueueCounts]
    loop: LoopInfo
    workers: list[WorkerInfo]
    remote_workers: list[RemoteWorkerInfo] = field(default_factory=list)
    # Where counts stop (COUNT_LIMIT when read).
    count_limit: int = COUNT_LIMIT

    @property
    def totals(self) -> dict[str, int]:
        return {c: sum(q.counts[c] for q in self.queues) for c, _label in COLUMNS}

    @property
    def totals_capped(self) -> frozenset[str]:
        """The columns whose total is a lower bound (some queue's count is capped)."""
        return frozenset().union(*(q.capped for q in self.queues))

    @property
    def totals_shown(self) -> dict[str, str]:
        capped = self.totals_capped
        return {c: f"{n}+" if c in capped else str(n) for c, n in self.totals.items()}

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
                "lease_expires_at": iso(self.loop.lease_expires_at),
                "lease_lapsed": self.loop.lease_lapsed,
                "leader": self.loop.leader,
                "next_wake_at": iso(self.loop.next_wake_at),
                "updated_at": iso(self.loop.updated_at),
            },
            "workers": [
                {
                    "id": w.id,
                    "host": w.host,
                    "pid": w.pid,
                    "seen_at": iso(w.seen_at),
                    "serving": w.serving,
                    "leads": w.leads,
                }
                for w in self.workers
            ],
            "remote_workers": [
                {
                    "key": r.key,
                    "prefix": r.prefix,
                    "queues": r.queues,
                    "host": r.host,
                    "last_seen": iso(r.last_seen),
                    "running": r.running,
                    "instances": r.instances,
                }
                for r in self.remote_workers
            ],
        }


def effective_limit(name: str, limits: QueueLimits, set_at_enqueue: int | None) -> tuple[int, str]:
    """The queue's limit as the loop applies it (see ``QueueLimits``), and where it is from."""
    at_runtime = limits.source == "runtime"
    if limits.max_concurrency == 0:
        return 0, "paused at runtime" if at_runtime else "paused"
    if limits.max_concurrency is not None:
        if at_runtime:
            return limits.max_concurrency, "set at runtime"
        configured = name in ratequeue_settings().QUEUES
        return limits.max_concurrency, "" if configured else "MAX_CONCURRENCY"
    note = "not configured" if set_at_enqueue is None else "set at enqueue"
    return limits.limit_for(set_at_enqueue), note


def queue_overview() -> QueueOverview:
    """Every configured queue and every queue that has jobs, with the loop and its workers."""
    settings = ratequeue_settings()
    counts = {name: _empty_counts() for name in [DEFAULT_QUEUE, *settings.QUEUES]}
    capped: dict[str, set[str]] = {}
    for status, queue, jobs in _capped_counts():
        counts.setdefault(queue, _empty_counts())[status] = min(jobs, COUNT_LIMIT)
        if jobs > COUNT_LIMIT:
            capped.setdefault(queue, set()).add(status)
    for queue, dispatched in _dispatched().items():
        queue_counts = counts.setdefault(queue, _empty_counts())
        queue_counts["dispatched"] = min(dispatched, queue_counts[Status.RUNNING])
        queue_counts[Status.RUNNING] -= queue_counts["dispatched"]
    overrides = queue_overrides()
    for name in overrides:
        counts.setdefault(name, _empty_counts())
    limits = {name: QueueLimits.of(name, overrides) for name in counts}
    set_at_enqueue = _set_at_enqueue(
        {
            name: head
            for name, queue_limits in limits.items()
            if queue_limits.max_concurrency is None
            and (head := _head_status(counts[name])) is not None
        }
    )
    queues = [
        QueueCounts(
            name,
            *effective_limit(name, limits[name], set_at_enqueue.get(name)),
            counts[name],
            frozenset(capped.get(name, ())),
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
        leader=state.leader,
    )
    live_since = clock.now() - timedelta(seconds=settings.WORKER_DEAD_AFTER)
    workers = [
        WorkerInfo(
            id=w.id,
            host=w.host,
            pid=w.pid,
            seen_at=w.seen_at,
            serving=w.serving,
            leads=w.id == state.leader and not loop.lease_lapsed,
        )
        for w in WorkerHeartbeat.objects.filter(seen_at__gte=live_since).order_by("host", "pid")
    ]
    return QueueOverview(
        queues=queues,
        loop=loop,
        workers=workers,
        remote_workers=remote_workers(),
        count_limit=COUNT_LIMIT,
    )


def remote_workers() -> list[RemoteWorkerInfo]:
    """The keys not revoked (by name), each with what its workers run now."""
    running = running_per_instance()
    return [
        RemoteWorkerInfo(
            key=key.name,
            prefix=key.prefix,
            queues=list(key.queues),
            host=key.last_host,
            last_seen=key.last_seen,
            instances={
                instance: count
                for (prefix, instance), count in sorted(running.items())
                if prefix == key.prefix
            },
        )
        for key in WorkerKey.objects.filter(revoked_at=None).order_by("name", "prefix")
    ]


def _queues_by_status(then: str) -> str:
    """SQL naming, as ``q(status, name)``, each status with each queue that has jobs in it,
    found by skipping through the dispatch index (a probe per queue), followed by ``then``
    (a SELECT from ``q``; ``{table}`` is the jobs table). Parameters: the statuses."""
    connection = queue_connection()
    table = connection.ops.quote_name(Job._meta.db_table)
    statuses = " UNION ALL ".join(["SELECT %s AS status"] * len(Status.values))
    return (
        f"WITH RECURSIVE q(status, name) AS ("
        f" SELECT s.status, (SELECT MIN(queue) FROM {table} j WHERE j.status = s.status)"
        f" FROM ({statuses}) s"
        f" UNION ALL"
        f" SELECT q.status,"
        f" (SELECT MIN(queue) FROM {table} j WHERE j.status = q.status AND j.queue > q.name)"
        f" FROM q WHERE q.name IS NOT NULL"
        f") {then.format(table=table)}"
    )


def _capped_counts() -> list[tuple[str, str, int]]:
    """(status, queue, jobs) for every status and queue with jobs, each count stopping at
    COUNT_LIMIT + 1, in one statement that reads only the dispatch index."""
    sql = _queues_by_status(
        "SELECT q.status, q.name, (SELECT COUNT(*) FROM ("
        " SELECT 1 FROM {table} j WHERE j.status = q.status AND j.queue = q.name LIMIT %s"
        ") bounded) FROM q WHERE q.name IS NOT NULL"
    )
    connection = queue_connection()
    with connection.cursor() as cursor:
        cursor.execute(sql, [*Status.values, COUNT_LIMIT + 1])
        return [(status, queue, jobs) for status, queue, jobs in cursor.fetchall()]


def queue_names() -> list[str]:
    """Every configured queue, every queue changed at runtime and every queue with jobs,
    without counting (for the admin's queue filter)."""
    connection = queue_connection()
    with connection.cursor() as cursor:
        cursor.execute(
            _queues_by_status("SELECT name FROM q WHERE name IS NOT NULL"), Status.values
        )
        with_jobs = {name for (name,) in cursor.fetchall()}
    configured = {DEFAULT_QUEUE, *ratequeue_settings().QUEUES, *queue_overrides()}
    return sorted(with_jobs | configured)


def _dispatched() -> Counter[str]:
    """Per queue, the RUNNING jobs whose attempt no worker has started yet."""
    rows = (
        Attempt.objects.filter(active=True, started_at=None, ended_at=None)
        .values_list("queue")
        .annotate(attempts=Count("pk"))
        .order_by()
    )
    return Counter(dict(rows))


# The unfinished statuses in the order the queue's next job is looked for: the one the
# loop dispatches next, else the one that will wait next.
HEAD_STATUSES = (Status.WAITING, Status.RETRYING, Status.SCHEDULED, Status.RUNNING)


def _head_status(counts: dict[str, int]) -> str | None:
    """The first of HEAD_STATUSES a queue has jobs in (RUNNING counts the dispatched)."""
    for status in HEAD_STATUSES:
        if counts[status] or (status == Status.RUNNING and counts["dispatched"]):
            return status
    return None


def _set_at_enqueue(heads: dict[str, str]) -> dict[str, int | None]:
    """The limit each unconfigured queue's jobs were enqueued with, as the first job the
    dispatch index reaches in the given status has it (a queue's jobs normally all carry
    the same; when they differ, the loop applies each job's own, and this shows the next
    one's). One statement, one index probe per queue, however many jobs each holds."""
    if not heads:
        return {}
    connection = queue_connection()
    table = connection.ops.quote_name(Job._meta.db_table)
    probes = " UNION ALL ".join(["SELECT %s AS status, %s AS name"] * len(heads))
    sql = (
        f"SELECT p.name, (SELECT j.max_concurrency FROM {table} j"
        f" WHERE j.status = p.status AND j.queue = p.name"
        f" ORDER BY j.concurrency_key, {ready_order('j')} LIMIT 1)"
        f" FROM ({probes}) p"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for name, status in heads.items() for value in (status, name)])
        return dict(cursor.fetchall())

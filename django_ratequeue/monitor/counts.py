"""Count each queue's jobs by status, bounded, and tell the limit the loop applies to it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from django.db.models import Count

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.fairness.keys import ready_order
from django_ratequeue.engine.limits import QueueLimits, Queues
from django_ratequeue.engine.models import Attempt, Job, Status, queue_connection
from django_ratequeue.engine.optionvalues import DEFAULT_QUEUE
from django_ratequeue.engine.skipscan import distinct_values

# Counts stop here (the admin shows "10000+"): counting further would read the whole history.
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
    """Return the job status a column's jobs are in (to filter the job list by it)."""
    return Status.RUNNING if column == "dispatched" else column


def _empty_counts() -> dict[str, int]:
    return {column: 0 for column, _label in COLUMNS}


@dataclass(frozen=True)
class QueueCounts:
    """One queue's jobs by status and the limit the loop applies to it.

    ``limit_note`` says where an unusual limit comes from: "paused" (in settings),
    "paused at runtime", "set at runtime" (see :mod:`..queue.control`), "MAX_CONCURRENCY"
    (the default queue when not configured), "set at enqueue" or "not configured" (then 1).
    """

    name: str
    limit: int
    limit_note: str
    counts: dict[str, int]
    # The columns whose count reached COUNT_LIMIT: there are at least that many.
    capped: frozenset[str] = frozenset()

    @property
    def limit_label(self) -> str:
        """Return the limit with where it comes from ("2 (set at runtime)", "paused")."""
        if self.limit_note.startswith("paused"):
            return self.limit_note
        return f"{self.limit} ({self.limit_note})" if self.limit_note else str(self.limit)


def effective_limit(name: str, limits: QueueLimits, set_at_enqueue: int | None) -> tuple[int, str]:
    """Return the queue's limit as the loop applies it (``QueueLimits``), and its source."""
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


def queue_counts(statuses: Collection[str] = Status.values) -> list[QueueCounts]:
    """Return every configured queue and every queue that has jobs, by name, with its counts.

    Only the jobs in ``statuses`` are counted (the others' columns stay 0): a scrape
    leaves the finished ones, which its counters hold, to save reading them."""
    counts = {name: _empty_counts() for name in [DEFAULT_QUEUE, *ratequeue_settings().QUEUES]}
    capped: dict[str, set[str]] = {}
    for status, queue, jobs in _capped_counts(list(statuses)):
        counts.setdefault(queue, _empty_counts())[status] = min(jobs, COUNT_LIMIT)
        if jobs > COUNT_LIMIT:
            capped.setdefault(queue, set()).add(status)
    for queue, dispatched in _dispatched().items():
        row = counts.setdefault(queue, _empty_counts())
        row["dispatched"] = min(dispatched, row[Status.RUNNING])
        row[Status.RUNNING] -= row["dispatched"]
    queues = Queues()
    for name in queues.overrides:
        counts.setdefault(name, _empty_counts())
    limits = {name: queues.limits(name) for name in counts}
    set_at_enqueue = _set_at_enqueue(
        {
            name: head
            for name, queue_limits in limits.items()
            if queue_limits.max_concurrency is None
            and (head := _head_status(counts[name])) is not None
        }
    )
    return [
        QueueCounts(
            name,
            *effective_limit(name, limits[name], set_at_enqueue.get(name)),
            counts[name],
            frozenset(capped.get(name, ())),
        )
        for name in sorted(counts)
    ]


def _queues_by_status(then: str, statuses: int = len(Status.values)) -> str:
    """Return SQL naming, as ``q(status, queue)``, each status with each queue with jobs in it.

    The pairs come from :func:`..queue.skipscan.distinct_values`, followed by ``then``
    (a SELECT from ``q``; ``{table}`` is the jobs table). Parameters: the ``statuses``
    statuses."""
    table = queue_connection().ops.quote_name(Job._meta.db_table)
    statuses_sql = " UNION ALL ".join(["SELECT %s AS status"] * statuses)
    queues = distinct_values("q", table, "queue", per=("status", statuses_sql))
    return f"WITH RECURSIVE {queues} {then.format(table=table)}"


def _capped_counts(statuses: list[str]) -> list[tuple[str, str, int]]:
    """Return (status, queue, jobs) for each of ``statuses`` and queue with jobs in it.

    Counts stop at COUNT_LIMIT + 1. One statement that reads only the dispatch index."""
    sql = _queues_by_status(
        "SELECT q.status, q.queue, (SELECT COUNT(*) FROM ("
        " SELECT 1 FROM {table} j WHERE j.status = q.status AND j.queue = q.queue LIMIT %s"
        ") bounded) FROM q WHERE q.queue IS NOT NULL",
        len(statuses),
    )
    connection = queue_connection()
    with connection.cursor() as cursor:
        cursor.execute(sql, [*statuses, COUNT_LIMIT + 1])
        return [(status, queue, jobs) for status, queue, jobs in cursor.fetchall()]


def queue_names() -> list[str]:
    """Return every queue configured, changed at runtime or with jobs, without counting.

    For the admin's queue filter."""
    connection = queue_connection()
    with connection.cursor() as cursor:
        cursor.execute(
            _queues_by_status("SELECT queue FROM q WHERE queue IS NOT NULL"), Status.values
        )
        with_jobs = {name for (name,) in cursor.fetchall()}
    return sorted(with_jobs | Queues().configured())


def _dispatched() -> Counter[str]:
    """Return, per queue, the RUNNING jobs whose attempt no worker has started yet."""
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
    """Return the first of HEAD_STATUSES a queue has jobs in (RUNNING counts dispatched)."""
    for status in HEAD_STATUSES:
        if counts[status] or (status == Status.RUNNING and counts["dispatched"]):
            return status
    return None


def _set_at_enqueue(heads: dict[str, str]) -> dict[str, int | None]:
    """Return the limit each unconfigured queue's next job was enqueued with.

    The next job is the first the dispatch index reaches in the queue's head status (a
    queue's jobs normally all carry the same limit). One statement, one index probe per
    queue, however many jobs each holds.
    """
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

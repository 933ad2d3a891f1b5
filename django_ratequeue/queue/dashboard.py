"""What the admin dashboard shows: the queues now and over the last hour or day.

One :func:`snapshot` reads, in a number of queries that follows the number of queues and
never the size of the jobs table: :func:`.stats.queue_overview` (its counts are bounded
index probes; with it the workers, local and remote), the active attempts once (few:
they hold the concurrency slots), the queues' limits, each configured rate limit's
key-less row, and the per-minute rollups of :mod:`.rollups` for the charts (summed by
point in SQL: one query for the charted queues, one for all queues). Like :mod:`.stats`,
it is for people: the loop decides from its own reads.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from .. import clock
from ..conf import ratequeue_settings
from ..ratelimit.decisions import project_row_value
from ..ratelimit.models import RateLimitState
from ..ratelimit.status import KeysNow, describe, keys_now
from . import rollups
from .limits import QueueLimits, environment_limit, queue_overrides
from .models import Attempt, QueueSetting, Status, Wait
from .stats import (
    COLUMNS,
    QueueCounts,
    QueueOverview,
    RemoteWorkerInfo,
    WorkerInfo,
    effective_limit,
    queue_overview,
)

Window = Literal["hour", "day"]
# The windows the charts cover, and the width of one bucket in each.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=1)),
    "day": (timedelta(days=1), timedelta(minutes=15)),
}
DEFAULT_WINDOW: Window = "hour"
# The busiest concurrency keys shown.
BUSIEST_KEYS = 10
# Queues charted one by one (the busiest first); the "all queues" charts sum every queue.
CHARTED_QUEUES = 8
# Active attempts read at most (they are at most MAX_CONCURRENCY plus the ones waiting on
# a subtask; the cap only guards the page against a runaway table).
ACTIVE_READ_LIMIT = 10_000
# The keys of a rate limit read at most (its rows with a key, projected to now).
KEYS_READ = 1_000


@dataclass(frozen=True)
class Depth:
    """How many jobs a queue held at the end of a bucket: ``unfinished`` (scheduled,
    waiting, retrying or running) and, of them, ``running``."""

    start: datetime
    unfinished: int
    running: int


@dataclass(frozen=True)
class QueueState:
    """One queue now: its counts and limits, whether it can start more, and its series."""

    counts: QueueCounts
    total_concurrency: int | None
    rate_limit: str | None
    rate_limit_text: str
    # Slots in use: active attempts holding a slot of this queue (dispatched or running).
    in_use: int
    paused: bool
    saturated: bool
    rate_bound: bool
    remote: bool
    series: list[rollups.Figures]
    depth: list[Depth]

    @property
    def name(self) -> str:
        return self.counts.name

    @property
    def badges(self) -> list[tuple[str, str]]:
        """(css class, words) for each state the queue is in; "can start more" when none."""
        found = [
            (kind, words)
            for kind, words, on in [
                ("paused", "paused", self.paused),
                ("saturated", "saturated", self.saturated),
                ("rate-bound", "rate-bound", self.rate_bound),
                ("remote", "remote workers", self.remote),
            ]
            if on
        ]
        return found or [("ok", "can start more")]


@dataclass(frozen=True)
class BusyKey:
    queue: str
    key: str
    running: int
    limit: int

    @property
    def at_limit(self) -> bool:
        return self.running >= self.limit


@dataclass(frozen=True)
class RateLimitUse:
    """A configured rate limit now: its value without a key (the one rate-gated queues
    draw from; below zero: tokens reserved ahead) against its capacity, meaningful when
    ``without_key`` (something draws on it without a key), and its keys."""

    name: str
    text: str
    value: float
    capacity: float
    without_key: bool
    keys: KeysNow
    queues: tuple[str, ...]

    @property
    def used(self) -> float:
        """The share of the capacity in use, 0 to 1 (1 also when reserved ahead)."""
        if self.capacity <= 0:
            return 0.0
        return min(1.0, max(0.0, (self.capacity - self.value) / self.capacity))

    @property
    def exhausted(self) -> bool:
        """Not one whole token left: what is drawn now waits (or is refused)."""
        return self.value < 1

    @property
    def reserved(self) -> float:
        return max(0.0, -self.value)

    @property
    def keys_shown(self) -> str:
        """The keys for people: "1000+" when there are more than KEYS_READ."""
        return f"{self.keys.keys}+" if self.keys.capped else str(self.keys.keys)


@dataclass(frozen=True)
class LocalWorker:
    info: WorkerInfo
    running: int


@dataclass(frozen=True)
class Snapshot:
    """Everything the dashboard shows, read at ``taken_at``."""

    taken_at: datetime
    window: Window
    step: timedelta
    overview: QueueOverview
    # The overview's queues and the ones with figures in the window; all of them summed.
    queues: list[QueueState]
    total: QueueState
    busiest_keys: list[BusyKey]
    rate_limits: list[RateLimitUse]
    local_workers: list[LocalWorker]
    max_concurrency: int
    in_use: int
    # The queues charted one by one (at most CHARTED_QUEUES).
    charted: list[str]

    @property
    def environment_saturated(self) -> bool:
        return self.in_use >= self.max_concurrency

    @property
    def remote_workers(self) -> list[RemoteWorkerInfo]:
        """The worker keys not revoked, each with what its remote workers run now."""
        return self.overview.remote_workers


@dataclass(frozen=True)
class _Active:
    """The active attempts, read once: slots per queue and per copy, runs per worker."""

    per_queue: Counter[str]
    per_copy: Counter[tuple[str, str]]
    environment: int
    per_worker: Counter[str]

    @classmethod
    def read(cls) -> _Active:
        rows = Attempt.objects.filter(active=True).values_list(
            "queue", "concurrency_key", "wait", "wait_queue", "worker", "worker_key", "started_at"
        )[:ACTIVE_READ_LIMIT]
        per_queue: Counter[str] = Counter()
        per_copy: Counter[tuple[str, str]] = Counter()
        per_worker: Counter[str] = Counter()
        environment = 0
        for queue, key, wait, wait_queue, worker, worker_key, started_at in rows:
            environment += wait == Wait.NONE
            if wait == Wait.NONE or wait_queue != queue:  # Attempt.holds_queue_slot
                per_queue[queue] += 1
                per_copy[(queue, key)] += 1
            if worker and worker_key is None and started_at is not None:  # a local one's
                per_worker[worker] += 1
        return cls(per_queue, per_copy, environment, per_worker)


def window_bounds(window: Window, now: datetime) -> tuple[datetime, timedelta]:
    """(since, step) of ``window`` ending ``now``: ``since`` is the start of the step
    ``span`` before the one holding ``now`` (aligned as :func:`.rollups.series` aligns
    its points), so that the series has ``span / step`` points, the last one filling now."""
    span, step = WINDOWS[window]
    width = int(step.total_seconds())
    current = math.floor(now.timestamp()) // width * width
    return datetime.fromtimestamp(current, UTC) - (span - step), step


def with_arrivals(
    figures: list[rollups.Figures], arrivals: dict[datetime, int], step: timedelta
) -> list[rollups.Figures]:
    """Return ``figures`` with ``arrivals`` (jobs by minute of creation, not counted in
    the rollups yet) added to the ``enqueued`` of the points that hold them."""
    if not figures or not arrivals:
        return figures
    added: Counter[int] = Counter()
    for minute, jobs in arrivals.items():
        point = (minute - figures[0].start) // step
        if 0 <= point < len(figures):
            added[point] += jobs
    return [
        replace(point, enqueued=point.enqueued + added[n]) if added[n] else point
        for n, point in enumerate(figures)
    ]


def depth_series(
    figures: list[rollups.Figures], unfinished_now: int, running_now: int
) -> list[Depth]:
    """The depth at the end of each bucket, rebuilt backwards from the counts now and the
    flows the rollups keep: each later bucket's enqueues added unfinished jobs, its
    completions, final failures and cancels removed some; each start added a running job,
    each completion, failure or retry ended one. (A cancel of a running job is not told
    apart from one of a waiting job: running stays within 0 and unfinished.)"""
    depth: list[Depth] = []
    unfinished, running = unfinished_now, running_now
    for bucket in reversed(figures):
        depth.append(Depth(bucket.start, unfinished, min(running, unfinished)))
        unfinished = max(
            0, unfinished - bucket.enqueued + bucket.completed + bucket.failed + bucket.canceled
        )
        running = max(
            0, running - bucket.started + bucket.completed + bucket.failed + bucket.retried
        )
    depth.reverse()
    return depth


UNFINISHED_COLUMNS = (
    Status.SCHEDULED,
    Status.WAITING,
    "dispatched",
    Status.RUNNING,
    Status.RETRYING,
)


def _rate_limits(gated: dict[str, list[str]]) -> list[RateLimitUse]:
    """Each configured limit's value without a key now (its rows of every limit in one
    read; a missing shard is full) and its keys (the first KEYS_READ)."""
    configured = ratequeue_settings().RATE_LIMITS
    rows: dict[str, list[RateLimitState]] = {}
    for row in RateLimitState.objects.filter(name__in=list(configured), key=""):
        rows.setdefault(row.name, []).append(row)
    now = clock.timestamp()
    uses = []
    for name, config in sorted(configured.items()):
        stored = {row.shard: row for row in rows.get(name, [])}
        value = sum(
            project_row_value(stored[shard], config, now) or 0.0
            if shard in stored
            else config.per_shard(shard).max_tokens
            for shard in range(config.shard_count)
        )
        queues = tuple(gated.get(name, ()))
        without_key = bool(stored or queues)
        uses.append(
            RateLimitUse(
                name,
                describe(config),
                value,
                config.max_tokens,
                without_key,
                keys_now(name, config, KEYS_READ),
                queues,
            )
        )
    return uses


def _queue_state(
    counts: QueueCounts,
    limits: QueueLimits,
    active: _Active,
    rate_values: dict[str, float],
    figures: list[rollups.Figures],
) -> QueueState:
    name = counts.name
    in_use = active.per_queue[name]
    copies = [n for (queue, _key), n in active.per_copy.items() if queue == name]
    if limits.total_concurrency is not None and in_use >= limits.total_concurrency:
        saturated = True
    else:
        # Each concurrency key is its own copy of the queue: saturated when every copy
        # running is at the limit (a queue without keys has the one copy "").
        saturated = bool(copies) and counts.limit > 0 and all(n >= counts.limit for n in copies)
    waiting = counts.counts[Status.WAITING] > 0
    rate_bound = bool(
        limits.rate_limit
        and waiting
        and not saturated
        and rate_values.get(limits.rate_limit, math.inf) < 1
    )
    config = ratequeue_settings().QUEUES.get(name)
    unfinished = sum(counts.counts[column] for column in UNFINISHED_COLUMNS)
    running = counts.counts["dispatched"] + counts.counts[Status.RUNNING]
    return QueueState(
        counts=counts,
        total_concurrency=limits.total_concurrency,
        rate_limit=limits.rate_limit,
        rate_limit_text=describe(ratequeue_settings().RATE_LIMITS.get(limits.rate_limit))
        if limits.rate_limit
        else "",
        in_use=in_use,
        paused=limits.max_concurrency == 0,
        saturated=saturated,
        rate_bound=rate_bound,
        remote=config is not None and config.remote,
        series=figures,
        depth=depth_series(figures, unfinished, running),
    )


def _total(
    queues: list[QueueState], figures: list[rollups.Figures], overview: QueueOverview
) -> QueueState:
    """The pseudo-queue "all queues": the counts summed, the charts of every queue."""
    totals = overview.totals
    counts = QueueCounts("all queues", sum(q.counts.limit for q in queues), "", totals)
    unfinished = sum(totals[column] for column in UNFINISHED_COLUMNS)
    running = totals["dispatched"] + totals[Status.RUNNING]
    return QueueState(
        counts=counts,
        total_concurrency=None,
        rate_limit=None,
        rate_limit_text="",
        in_use=sum(q.in_use for q in queues),
        paused=False,
        saturated=False,
        rate_bound=False,
        remote=False,
        series=figures,
        depth=depth_series(figures, unfinished, running),
    )


def _busiest(active: _Active, limits: dict[str, int]) -> list[BusyKey]:
    keyed = [(n, queue, key) for (queue, key), n in active.per_copy.items() if key]
    keyed.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [BusyKey(queue, key, n, limits.get(queue, 1)) for n, queue, key in keyed[:BUSIEST_KEYS]]


def _charted(queues: list[QueueCounts], active: _Active, with_figures: set[str]) -> list[str]:
    """The queues that get charts of their own: the ones with figures in the window or
    unfinished jobs, the ones with most slots in use and unfinished jobs first, at most
    CHARTED_QUEUES."""

    def unfinished(counts: QueueCounts) -> int:
        return sum(counts.counts[column] for column in UNFINISHED_COLUMNS)

    ranked = sorted(
        (q for q in queues if q.name in with_figures or unfinished(q)),
        key=lambda q: (-active.per_queue[q.name], -unfinished(q), q.name),
    )
    return [q.name for q in ranked[:CHARTED_QUEUES]]


def _without_jobs(
    with_figures: set[str],
    overview: QueueOverview,
    overrides: dict[str, QueueSetting],
    max_concurrency: int,
) -> list[QueueCounts]:
    """The queues with figures in the window that the overview does not list (their jobs
    are pruned already: figures are kept longer), with no job."""
    names = sorted(with_figures - {q.name for q in overview.queues})
    return [
        QueueCounts(
            name,
            *effective_limit(name, QueueLimits.of(name, overrides, max_concurrency), None),
            dict.fromkeys([column for column, _label in COLUMNS], 0),
        )
        for name in names
    ]


def snapshot(window: Window = DEFAULT_WINDOW) -> Snapshot:
    """Every queue now, with the charts' series over ``window`` ("hour" or "day")."""
    if window not in WINDOWS:
        raise ValueError(f"Unknown window {window!r}: one of {', '.join(WINDOWS)}.")
    now = clock.now()
    since, step = window_bounds(window, now)
    overview = queue_overview()
    overrides = queue_overrides()
    max_concurrency = environment_limit()
    active = _Active.read()
    with_figures = set(rollups.queues_with_figures(since))
    listed = [*overview.queues, *_without_jobs(with_figures, overview, overrides, max_concurrency)]
    listed.sort(key=lambda counts: counts.name)
    limits = {q.name: QueueLimits.of(q.name, overrides, max_concurrency) for q in listed}
    gated: dict[str, list[str]] = {}
    for name, queue_limits in limits.items():
        if queue_limits.rate_limit:
            gated.setdefault(queue_limits.rate_limit, []).append(name)
    rate_limits = _rate_limits(gated)
    rate_values = {use.name: use.value for use in rate_limits}
    charted = _charted(listed, active, with_figures)
    charted_series = rollups.series_by_queue(charted, since, now, step)
    # Read after the series: an arrival counted in between is missed until the next look,
    # never counted twice.
    uncounted = rollups.uncounted_arrivals(since, now)
    queues = [
        _queue_state(
            counts,
            limits[counts.name],
            active,
            rate_values,
            with_arrivals(
                charted_series.get(counts.name, []), uncounted.get(counts.name, {}), step
            ),
        )
        for counts in listed
    ]
    all_arrivals: Counter[datetime] = Counter()
    for by_minute in uncounted.values():
        all_arrivals.update(by_minute)
    total = _total(
        queues, with_arrivals(rollups.series(None, since, now, step), all_arrivals, step), overview
    )
    workers = [LocalWorker(w, active.per_worker[w.id]) for w in overview.workers]
    return Snapshot(
        taken_at=now,
        window=window,
        step=step,
        overview=overview,
        queues=queues,
        total=total,
        busiest_keys=_busiest(active, {q.name: q.counts.limit for q in queues}),
        rate_limits=rate_limits,
        local_workers=workers,
        max_concurrency=max_concurrency,
        in_use=active.environment,
        charted=charted,
    )

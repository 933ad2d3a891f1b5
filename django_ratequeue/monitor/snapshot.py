"""Read everything the admin's dashboard shows: the queues now and over a window."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.jobs import (
    QueueLimits,
    Queues,
    Status,
    default_weight,
    key_settings,
    unknown_functions,
)
from django_ratequeue.models import Attempt, Wait
from django_ratequeue.monitor.counts import COLUMNS, QueueCounts, effective_limit
from django_ratequeue.monitor.figures import Figures, queues_with_figures, series, series_by_queue
from django_ratequeue.monitor.overview import QueueOverview, queue_overview
from django_ratequeue.monitor.ratelimits import RateLimitUse, rate_limit_uses
from django_ratequeue.monitor.series import (
    DEFAULT_WINDOW,
    WINDOWS,
    Depth,
    Window,
    depth_series,
    window_bounds,
    with_arrivals,
)
from django_ratequeue.monitor.workers import NoWorker, RemoteWorker, Worker
from django_ratequeue.plugins.rollups.counting import uncounted_arrivals
from django_ratequeue.ratelimit.status import describe

# The busiest concurrency keys shown.
BUSIEST_KEYS = 10
# Queues charted one by one (the busiest first); the "all queues" charts sum every queue.
CHARTED_QUEUES = 8
# Active attempts read at most (they are at most MAX_CONCURRENCY plus the ones waiting on
# a subtask; the cap only guards the page against a runaway table).
ACTIVE_READ_LIMIT = 10_000


class Condition(StrEnum):
    """What holds a queue back from starting more jobs, or where its jobs run."""

    PAUSED = "paused"
    SATURATED = "saturated"
    RATE_BOUND = "rate-bound"
    REMOTE = "remote"
    NO_WORKER = "no worker"


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
    series: list[Figures]
    depth: list[Depth]
    # No live worker runs its jobs (a remote queue: counted only while some wait).
    unserved: bool = False

    @property
    def name(self) -> str:
        """Return the queue's name ("all queues" for the total)."""
        return self.counts.name

    @property
    def conditions(self) -> list[Condition]:
        """Return the conditions the queue is in (none: it can start more)."""
        flags = [
            (Condition.NO_WORKER, self.unserved),
            (Condition.PAUSED, self.paused),
            (Condition.SATURATED, self.saturated),
            (Condition.RATE_BOUND, self.rate_bound),
            (Condition.REMOTE, self.remote),
        ]
        return [condition for condition, on in flags if on]


@dataclass(frozen=True)
class BusyKey:
    """A concurrency key of a queue and the attempts it holds slots with."""

    queue: str
    key: str
    running: int
    limit: int
    # Its share of the starts when keys are backlogged (docs/key-limits.md).
    weight: int = 1
    # Where its limit and weight come from: "row" (set for the key: set_key_limit, the
    # admin), "function" (the queue's key_limits), "" (the queue's defaults).
    source: str = ""

    @property
    def at_limit(self) -> bool:
        """Say whether the key holds all the slots its queue's limit gives it."""
        return self.running >= self.limit


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
    # The overview's live workers, each with the attempts it runs.
    local_workers: list[Worker]
    max_concurrency: int
    in_use: int
    # The queues charted one by one (at most CHARTED_QUEUES).
    charted: list[str]
    # The functions whose jobs wait because no running worker knows them, with how many.
    unknown_functions: list[tuple[str, int]] = field(default_factory=list)

    @property
    def environment_saturated(self) -> bool:
        """Say whether the attempts running fill MAX_CONCURRENCY."""
        return self.in_use >= self.max_concurrency

    @property
    def remote_workers(self) -> list[RemoteWorker]:
        """Return the worker keys not revoked, each with what its remote workers run now."""
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
        """Read the active attempts (at most ACTIVE_READ_LIMIT) in one query."""
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


UNFINISHED_COLUMNS = (
    Status.SCHEDULED,
    Status.WAITING,
    "dispatched",
    Status.RUNNING,
    Status.RETRYING,
)


def _queue_state(
    counts: QueueCounts,
    limits: QueueLimits,
    active: _Active,
    rate_values: dict[str, float],
    figures: list[Figures],
    missing: NoWorker,
) -> QueueState:
    """Return one queue's state: its slots in use, what holds it back, its series."""
    name = counts.name
    in_use = active.per_queue[name]
    saturated = _saturated(counts, limits, active)
    waiting = counts.counts[Status.WAITING] > 0
    rate_bound = bool(
        limits.rate_limit
        and waiting
        and not saturated
        and rate_values.get(limits.rate_limit, math.inf) < 1
    )
    config = ratequeue_settings().QUEUES.get(name)
    remote = config is not None and config.remote
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
        remote=remote,
        series=figures,
        depth=depth_series(figures, unfinished, running),
        unserved=name in missing.remote_queues if remote else missing.local,
    )


def _saturated(counts: QueueCounts, limits: QueueLimits, active: _Active) -> bool:
    """Say whether a queue runs all it may: its total_concurrency, or each key its limit."""
    total = limits.total_concurrency
    if total is not None and active.per_queue[counts.name] >= total:
        return True
    # Each concurrency key is its own copy of the queue: saturated when every copy
    # running is at the limit (a queue without keys has the one copy "").
    copies = [n for (queue, _key), n in active.per_copy.items() if queue == counts.name]
    return bool(copies) and counts.limit > 0 and all(n >= counts.limit for n in copies)


def _total(
    queues: list[QueueState], figures: list[Figures], overview: QueueOverview
) -> QueueState:
    """Return the pseudo-queue "all queues": the counts summed, the charts of every queue."""
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
    """Return the BUSIEST_KEYS concurrency keys with most attempts holding a slot."""
    keyed = [(n, queue, key) for (queue, key), n in active.per_copy.items() if key]
    keyed.sort(key=lambda item: (-item[0], item[1], item[2]))
    keyed = keyed[:BUSIEST_KEYS]
    own = key_settings([(queue, key) for _n, queue, key in keyed])  # one bounded read
    busiest = []
    for n, queue, key in keyed:
        settings, source = own[(queue, key)]
        limit = (
            limits.get(queue, 1) if settings.max_concurrency is None else settings.max_concurrency
        )
        weight = default_weight(queue) if settings.weight is None else settings.weight
        busiest.append(BusyKey(queue, key, n, limit, weight, source))
    return busiest


def _charted(queues: list[QueueCounts], active: _Active, with_figures: set[str]) -> list[str]:
    """Return the queues that get charts of their own, at most CHARTED_QUEUES.

    They are the ones with figures in the window or unfinished jobs, the ones with most
    slots in use and unfinished jobs first.
    """

    def unfinished(counts: QueueCounts) -> int:
        return sum(counts.counts[column] for column in UNFINISHED_COLUMNS)

    ranked = sorted(
        (q for q in queues if q.name in with_figures or unfinished(q)),
        key=lambda q: (-active.per_queue[q.name], -unfinished(q), q.name),
    )
    return [q.name for q in ranked[:CHARTED_QUEUES]]


def _unkeyed_values(uses: list[RateLimitUse]) -> dict[str, float]:
    """Return the rate limits' values, by name, but the keyed ones'.

    A keyed limit's value without a key does not hold back a queue's keys."""
    return {use.name: use.value for use in uses if not use.keyed}


def _without_jobs(
    with_figures: set[str],
    overview: QueueOverview,
    queues: Queues,
) -> list[QueueCounts]:
    """Return the queues with figures in the window that the overview does not list.

    Their jobs are pruned already (figures are kept longer): they have no job."""
    names = sorted(with_figures - {q.name for q in overview.queues})
    return [
        QueueCounts(
            name,
            *effective_limit(name, queues.limits(name), None),
            dict.fromkeys([column for column, _label in COLUMNS], 0),
        )
        for name in names
    ]


def _gated(limits: dict[str, QueueLimits]) -> dict[str, list[str]]:
    """Return, per rate limit, the queues it gates."""
    gated: dict[str, list[str]] = {}
    for name, queue_limits in limits.items():
        if queue_limits.rate_limit:
            gated.setdefault(queue_limits.rate_limit, []).append(name)
    return gated


def _charts(
    charted: list[str], since: datetime, now: datetime, step: timedelta
) -> tuple[dict[str, list[Figures]], list[Figures]]:
    """Return the series of the charted queues and of all queues, uncounted arrivals added."""
    charted_series = series_by_queue(charted, since, now, step)
    # Read after the series: an arrival counted in between is missed until the next look,
    # never counted twice.
    uncounted = uncounted_arrivals(since, now)
    by_queue = {
        name: with_arrivals(charted_series.get(name, []), uncounted.get(name, {}), step)
        for name in charted
    }
    all_arrivals: Counter[datetime] = Counter()
    for by_minute in uncounted.values():
        all_arrivals.update(by_minute)
    return by_queue, with_arrivals(series(None, since, now, step), all_arrivals, step)


def snapshot(window: Window = DEFAULT_WINDOW) -> Snapshot:
    """Return every queue now, with the charts' series over ``window`` ("hour" or "day")."""
    if window not in WINDOWS:
        raise ValueError(f"Unknown window {window!r}: one of {', '.join(WINDOWS)}.")
    now = clock.now()
    since, step = window_bounds(window, now)
    overview = queue_overview()
    in_force = Queues()
    active = _Active.read()
    with_figures = set(queues_with_figures(since))
    listed = [*overview.queues, *_without_jobs(with_figures, overview, in_force)]
    listed.sort(key=lambda counts: counts.name)
    limits = {q.name: in_force.limits(q.name) for q in listed}
    rate_limits = rate_limit_uses(_gated(limits))
    rate_values = _unkeyed_values(rate_limits)
    charted = _charted(listed, active, with_figures)
    series, all_series = _charts(charted, since, now, step)
    queues = [
        _queue_state(
            c, limits[c.name], active, rate_values, series.get(c.name, []), overview.no_worker
        )
        for c in listed
    ]
    return Snapshot(
        taken_at=now,
        window=window,
        step=step,
        overview=overview,
        queues=queues,
        total=_total(queues, all_series, overview),
        busiest_keys=_busiest(active, {q.name: q.counts.limit for q in queues}),
        rate_limits=rate_limits,
        local_workers=[replace(w, running=active.per_worker[w.id]) for w in overview.workers],
        max_concurrency=in_force.environment,
        in_use=active.environment,
        charted=charted,
        unknown_functions=unknown_functions(now, {w.id: w.functions for w in overview.workers}),
    )

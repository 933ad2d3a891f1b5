"""Prometheus metrics of the queues, the loop and the workers, read at scrape time.

Mount :func:`metrics_view` (``path("metrics/", metrics_view)``) or register
:class:`RateQueueCollector` in a registry of your own. A scrape reads a row per queue of
the totals, the queues' bounded counts, the active attempts, the loop's row and the
heartbeats: never the jobs' history. docs/metrics.md tells what each metric means.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from itertools import accumulate

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ImportError as exc:  # an extra: pip install django-ratequeue[prometheus]
    raise ImproperlyConfigured(
        "django_ratequeue.contrib.prometheus needs prometheus-client: "
        "pip install 'django-ratequeue[prometheus]'."
    ) from exc

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.models import FINAL_STATUSES, LoopStatus, Status
from django_ratequeue.monitor.counts import COLUMNS, COUNT_LIMIT, QueueCounts
from django_ratequeue.monitor.figures import totals
from django_ratequeue.monitor.overview import LoopInfo, QueueOverview, queue_overview
from django_ratequeue.plugins.rollups.models import (
    HISTOGRAM_BOUNDS,
    HISTOGRAM_BUCKETS,
    bucket_field,
)
from django_ratequeue.ratelimit.counting import decision_totals

# The statuses ratequeue_jobs_unfinished counts: the finished jobs are in
# ratequeue_jobs_total (a family of its own name: OpenMetrics gives ratequeue_jobs_total's
# samples to the family ratequeue_jobs, so no gauge may have that name).
UNFINISHED_STATUSES = [s for s in Status.values if s not in FINAL_STATUSES]
# The counted events of ratequeue_jobs_total, as the totals name them.
JOB_EVENTS = ("enqueued", "started", "completed", "failed", "retried", "canceled")
# The bucket bounds as Prometheus' ``le`` labels, +Inf last.
BUCKET_LABELS = (*(repr(bound) for bound in HISTOGRAM_BOUNDS), "+Inf")


class RateQueueCollector(Collector):
    """Collect the metrics of docs/metrics.md from the database, at each scrape."""

    def collect(self) -> Iterator[Metric]:
        """Read the totals and the overview; yield every metric family."""
        figures = totals()
        overview = queue_overview(UNFINISHED_STATUSES)
        yield from total_metrics(figures)
        yield from job_gauges(overview.queues)
        yield from loop_metrics(overview.loop)
        yield from worker_metrics(overview)
        yield decision_metric(decision_totals())


def total_metrics(figures: dict[str, dict[str, int]]) -> Iterator[Metric]:
    """Yield the counters and histograms of each queue's totals since first counted."""
    jobs = CounterMetricFamily(
        "ratequeue_jobs",
        "Jobs by queue and event, since first counted.",
        labels=["queue", "event"],
    )
    tokens = CounterMetricFamily(
        "ratequeue_tokens",
        "Rate-limit tokens reserved and spent by each queue's jobs.",
        labels=["queue", "event"],
    )
    for queue, row in figures.items():
        for event in JOB_EVENTS:
            jobs.add_metric([queue, event], row[event])
        tokens.add_metric([queue, "reserved"], row["tokens_reserved"])
        tokens.add_metric([queue, "spent"], row["tokens_spent"])
    yield jobs
    yield tokens
    for histogram, doc in (
        ("wait", "Seconds from a job's ready time to its dispatch, per attempt."),
        ("run", "Seconds from an attempt's start to its end."),
    ):
        family = HistogramMetricFamily(f"ratequeue_{histogram}_seconds", doc, labels=["queue"])
        for queue, row in figures.items():
            family.add_metric(
                [queue], histogram_buckets(row, histogram), row[f"{histogram}_ms"] / 1000
            )
        yield family


def histogram_buckets(row: dict[str, int], histogram: str) -> list[tuple[str, float]]:
    """Return a histogram's buckets as Prometheus counts them: cumulative, +Inf last."""
    counts = [row[bucket_field(histogram, bucket)] for bucket in range(HISTOGRAM_BUCKETS)]
    return list(zip(BUCKET_LABELS, accumulate(counts), strict=True))


def job_gauges(queues: list[QueueCounts]) -> Iterator[Metric]:
    """Yield each queue's unfinished jobs by status (up to COUNT_LIMIT) and its limit."""
    jobs = GaugeMetricFamily(
        "ratequeue_jobs_unfinished",
        "Unfinished jobs by queue and status now (dispatched: handed to a worker, not"
        f" started yet). A count stops at {COUNT_LIMIT}: at least that many.",
        labels=["queue", "status"],
    )
    limit = GaugeMetricFamily(
        "ratequeue_queue_limit",
        "The jobs a queue may run at once, as the loop applies it (0: paused).",
        labels=["queue"],
    )
    for queue in queues:
        for column, _label in COLUMNS:
            if column in FINAL_STATUSES:
                continue
            jobs.add_metric([queue.name, str(column)], queue.counts[column])
        limit.add_metric([queue.name], queue.limit)
    yield jobs
    yield limit
    environment = GaugeMetricFamily(
        "ratequeue_environment_limit", "MAX_CONCURRENCY: the jobs the environment may run at once."
    )
    environment.add_metric([], ratequeue_settings().MAX_CONCURRENCY)
    yield environment


def loop_metrics(loop: LoopInfo) -> Iterator[Metric]:
    """Yield the loop's state, generation, lease and time since it last wrote its row."""
    state = GaugeMetricFamily(
        "ratequeue_loop_state", "1 for the state the loop last recorded.", labels=["state"]
    )
    for value in LoopStatus.values:
        state.add_metric([value], float(loop.state == value))
    yield state
    yield GaugeMetricFamily(
        "ratequeue_loop_generation", "How many times the lead has changed hands.", loop.generation
    )
    yield GaugeMetricFamily(
        "ratequeue_loop_lease_lapsed",
        "1 when the leader's lease ran out (no loop leads until a follower takes over).",
        float(loop.lease_lapsed),
    )
    if loop.updated_at is not None:
        yield GaugeMetricFamily(
            "ratequeue_loop_last_write_age_seconds",
            "Seconds since the loop last wrote its row (a resting loop writes rarely).",
            max((clock.now() - loop.updated_at).total_seconds(), 0.0),
        )


def worker_metrics(overview: QueueOverview) -> Iterator[Metric]:
    """Yield the live workers, local and remote, and the attempts dispatched and running."""
    workers = GaugeMetricFamily(
        "ratequeue_workers",
        "Live local worker processes, and remote worker keys seen within WORKER_DEAD_AFTER.",
        labels=["kind"],
    )
    seen_after = clock.now() - timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER)
    remote = [r for r in overview.remote_workers if r.last_seen and r.last_seen >= seen_after]
    workers.add_metric(["local"], len(overview.workers))
    workers.add_metric(["remote"], len(remote))
    yield workers
    leader = GaugeMetricFamily(
        "ratequeue_loop_leader", "1 for the worker process that leads the loop.", labels=["worker"]
    )
    for worker in overview.workers:
        if worker.leads:
            leader.add_metric([worker.id], 1)
    yield leader
    running: Counter[str] = Counter()
    for queue in overview.queues:
        running[queue.name] = queue.counts["dispatched"] + queue.counts["running"]
    slots = GaugeMetricFamily(
        "ratequeue_slots_in_use",
        "Attempts holding a slot of their queue (dispatched or running).",
        labels=["queue"],
    )
    for name, used in sorted(running.items()):
        slots.add_metric([name], used)
    yield slots


def decision_metric(rows: list[tuple[str, str, int]]) -> Metric:
    """Return the rate limits' consumes by limit and result, since first counted."""
    decisions = CounterMetricFamily(
        "ratequeue_rate_limit_decisions",
        "Rate-limit consumes by limit and result (allowed, reserved, refused), since first"
        " counted; each process adds its own every few seconds.",
        labels=["name", "result"],
    )
    for name, result, count in rows:
        decisions.add_metric([name, result], count)
    return decisions


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Answer a Prometheus scrape with the metrics of this app alone."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RateQueueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

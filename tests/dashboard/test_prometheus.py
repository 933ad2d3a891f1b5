"""The Prometheus exposition, parsed with prometheus-client's own parser, says what the
tables say after a mixed run, and its counters never go down when retention prunes."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from django.test import RequestFactory
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from django_ratequeue import enqueue
from django_ratequeue.contrib.prometheus import metrics_view
from django_ratequeue.engine.models import FINAL_STATUSES, Status
from django_ratequeue.models import Attempt, Job, QueueMinute
from django_ratequeue.plugins.rollups.counting import ARRIVALS_SETTLE
from django_ratequeue.plugins.rollups.pruning import prune_rollups
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, run_pass

pytestmark = pytest.mark.django_db


def scrape() -> dict[str, list[Sample]]:
    """Return the samples of a scrape of the view, by sample name."""
    response = metrics_view(RequestFactory().get("/metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def by_labels(samples: list[Sample], *names: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels[name] for name in names): s.value for s in samples}


def mixed_run(frozen: Clock) -> None:
    """Run jobs that complete, fail after retries, fail at once and are canceled."""
    quick: Any = {"retry_count": 1, "initial_interval": 1, "randomize_interval": False}
    for n in range(4):
        enqueue(jobs.add, args=[n, n], queue="a")
    for _ in range(2):
        enqueue(jobs.fail, queue="b", retries=quick)
    enqueue(jobs.fail_hard, queue="b")
    later = [enqueue(jobs.add, args=[1, 1], queue="a", run_after=600) for _ in range(2)]
    frozen.advance(0.5)
    run_pass()
    later[0].cancel()
    for _ in range(20):  # the retries come due
        if not Job.objects.exclude(pk=later[1].id).exclude(status__in=FINAL_STATUSES).exists():
            break
        frozen.advance(1.5)
        run_pass()
    frozen.advance(ARRIVALS_SETTLE.total_seconds() + 1)
    run_pass()


def table_events() -> dict[tuple[str, str], int]:
    """Count each queue's events in the jobs and attempts tables."""
    events: Counter[tuple[str, str]] = Counter()
    figure = {Status.COMPLETE: "completed", Status.FAILED: "failed", Status.CANCELED: "canceled"}
    for job in Job.objects.all():
        events[job.queue, "enqueued"] += 1
        if job.status in figure:
            events[job.queue, figure[Status(job.status)]] += 1
        events[job.queue, "retried"] += max(job.attempts - 1, 0)
    for attempt in Attempt.objects.all():
        events[attempt.queue, "started"] += 1
    return events


def test_the_exposition_says_what_the_tables_say(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = freeze(monkeypatch)
    mixed_run(frozen)
    samples = scrape()

    counted = by_labels(samples["ratequeue_jobs_total"], "queue", "event")
    expected = table_events()
    assert {k: v for k, v in counted.items() if v} == {k: v for k, v in expected.items() if v}
    assert counted["b", "failed"] == 3 and counted["b", "retried"] == 2
    statuses = Counter(
        Job.objects.exclude(status__in=FINAL_STATUSES).values_list("queue", "status")
    )
    gauges = by_labels(samples["ratequeue_jobs_unfinished"], "queue", "status")
    assert {k: v for k, v in gauges.items() if v} == dict(statuses)
    # Each attempt dispatched counts one wait and each that ran one run.
    waits = by_labels(samples["ratequeue_wait_seconds_count"], "queue")
    runs = by_labels(samples["ratequeue_run_seconds_count"], "queue")
    assert waits == runs == {("a",): 4, ("b",): 5}
    buckets = [s for s in samples["ratequeue_run_seconds_bucket"] if s.labels["queue"] == "b"]
    assert [s.labels["le"] for s in buckets][-1] == "+Inf"
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)
    assert sum(by_labels(samples["ratequeue_loop_state"], "state").values()) == 1


def test_counters_never_go_down_when_retention_prunes(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    frozen = freeze(monkeypatch)
    mixed_run(frozen)
    before = by_labels(scrape()["ratequeue_jobs_total"], "queue", "event")
    settings.RATEQUEUE = {**settings.RATEQUEUE, "ROLLUP_RETENTION": timedelta(seconds=1)}
    QueueMinute.objects.update(minute=F("minute") - timedelta(days=30))
    assert prune_rollups() > 0 and not QueueMinute.objects.exists()
    assert by_labels(scrape()["ratequeue_jobs_total"], "queue", "event") == before
    handle = enqueue(jobs.add, args=[1, 2], queue="a")
    frozen.advance(ARRIVALS_SETTLE.total_seconds() + 1)
    run_pass()
    run_pass()  # takes in the end of the attempt the last pass ran
    assert handle.status() == Status.COMPLETE
    after = by_labels(scrape()["ratequeue_jobs_total"], "queue", "event")
    assert after["a", "enqueued"] == before["a", "enqueued"] + 1
    assert after["a", "completed"] == before["a", "completed"] + 1


def test_each_family_has_one_type_under_its_own_name() -> None:
    """A gauge named like a counter's family (ratequeue_jobs beside ratequeue_jobs_total)
    would be parsed as one family: each name must come back once, with its own type."""
    enqueue(jobs.add, args=[1, 2])
    response = metrics_view(RequestFactory().get("/metrics"))
    families = list(text_string_to_metric_families(response.content.decode()))
    names = [family.name for family in families]
    assert len(names) == len(set(names))
    types = {family.name: family.type for family in families}
    assert types["ratequeue_jobs"] == "counter"
    assert types["ratequeue_jobs_unfinished"] == "gauge"
    unfinished = next(f for f in families if f.name == "ratequeue_jobs_unfinished")
    assert {s.labels["status"] for s in unfinished.samples if s.value} == {"waiting"}

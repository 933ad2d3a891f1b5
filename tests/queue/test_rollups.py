"""The per-minute figures of the queues: their series, histograms and upkeep by the loop."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from django_ratequeue.models import QueueMinute
from django_ratequeue.queue.models import HISTOGRAM_BOUNDS, HISTOGRAM_BUCKETS, bucket_field
from django_ratequeue.queue.rollups import (
    MAX_POINTS,
    bucket_of,
    percentile,
    queues_with_figures,
    series,
)

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def minute_row(queue: str, minute: datetime, waits: list[float] = (), **counts: int) -> None:
    buckets = {bucket_field("wait", bucket_of(w)): 0 for w in waits}
    for wait in waits:
        buckets[bucket_field("wait", bucket_of(wait))] += 1
    QueueMinute.objects.create(queue=queue, minute=minute, **counts, **buckets)


def reference(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of a sorted list."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


@pytest.mark.django_db
def test_series_is_zero_filled_and_sums_queues_and_steps() -> None:
    minute_row("a", T0, completed=3, enqueued=4, waits=[0.2, 0.3])
    minute_row("b", T0, completed=1, failed=2)
    minute_row("a", T0 + timedelta(minutes=2), started=5, tokens_reserved=7, tokens_spent=6)
    minute_row("a", T0 - timedelta(minutes=1), completed=100)  # before the range

    points = series("a", T0 + timedelta(seconds=30), T0 + timedelta(minutes=3, seconds=10))
    assert [p.start for p in points] == [T0 + timedelta(minutes=n) for n in range(4)]
    assert [p.completed for p in points] == [3, 0, 0, 0]
    assert [p.started for p in points] == [0, 0, 5, 0]
    assert (points[2].tokens_reserved, points[2].tokens_spent) == (7, 6)
    assert points[0].enqueued == 4
    assert points[1].wait_p50 is None and points[1].run_p99 is None
    assert bucket_of(points[0].wait_p50) == bucket_of(0.2)
    assert bucket_of(points[0].wait_p99) == bucket_of(0.3)

    every = series(None, T0, T0 + timedelta(minutes=2))
    assert [(p.completed, p.failed) for p in every] == [(4, 2), (0, 0), (0, 0)]

    # 5-minute points start at multiples of 5 minutes since the epoch.
    (point,) = series(
        None, T0 + timedelta(minutes=1), T0 + timedelta(minutes=4), timedelta(minutes=5)
    )
    assert (point.start, point.completed, point.started) == (T0, 4, 5)

    assert queues_with_figures(T0 + timedelta(seconds=59)) == ["a", "b"]
    assert queues_with_figures(T0 + timedelta(minutes=1)) == ["a"]
    assert queues_with_figures(T0 + timedelta(minutes=3)) == []


@pytest.mark.django_db
def test_series_refuses_what_it_cannot_answer() -> None:
    for step in [timedelta(0), timedelta(seconds=90), timedelta(minutes=-1)]:
        with pytest.raises(ValueError, match="whole number of minutes"):
            series(None, T0, T0, step)
    with pytest.raises(ValueError, match="aware"):
        series(None, T0.replace(tzinfo=None), T0)
    with pytest.raises(ValueError, match="before"):
        series(None, T0, T0 - timedelta(minutes=1))
    with pytest.raises(ValueError, match="at most"):
        series(None, T0, T0 + timedelta(minutes=MAX_POINTS))
    assert len(series(None, T0, T0 + timedelta(minutes=MAX_POINTS - 1))) == MAX_POINTS


def test_buckets_cover_a_millisecond_to_an_hour() -> None:
    assert HISTOGRAM_BOUNDS[0] == 0.001 and HISTOGRAM_BOUNDS[-1] > 3600
    assert [bucket_of(s) for s in [-1, 0, 0.0009, 0.001, 0.0015, 0.002]] == [0, 0, 0, 1, 1, 2]
    assert bucket_of(HISTOGRAM_BOUNDS[-1]) == bucket_of(1e9) == HISTOGRAM_BUCKETS - 1
    assert percentile([0] * HISTOGRAM_BUCKETS, 0.5) is None


@pytest.mark.parametrize("seed", range(20))
def test_percentiles_fall_in_the_bucket_of_the_sorted_lists(seed: int) -> None:
    rng = random.Random(seed)
    samples = [
        rng.lognormvariate(rng.uniform(-8, 8), rng.uniform(0.1, 3))
        for _ in range(rng.randint(1, 500))
    ]
    buckets = [0] * HISTOGRAM_BUCKETS
    for sample in samples:
        buckets[bucket_of(sample)] += 1
    for fraction in (0.5, 0.95, 0.99, 1.0):
        estimate = percentile(buckets, fraction)
        assert estimate is not None
        assert bucket_of(estimate) == bucket_of(reference(samples, fraction)), fraction

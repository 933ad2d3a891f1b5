"""The per-minute figures of the queues: their series, histograms and upkeep by the loop."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratequeue import enqueue
from django_ratequeue.engine.models import FINAL_STATUSES
from django_ratequeue.engine.phases import Rest
from django_ratequeue.models import Attempt, Job, QueueMinute, RollupCursor
from django_ratequeue.monitor.figures import (
    MAX_POINTS,
    percentile,
    percentiles,
    queues_with_figures,
    series,
    series_by_queue,
)
from django_ratequeue.plugins.rollups.counting import (
    ARRIVALS_SETTLE,
    FINAL_FIGURES,
    Tally,
    bucket_of,
    floor_minute,
    settled_until,
)
from django_ratequeue.plugins.rollups.models import (
    HISTOGRAM_BOUNDS,
    HISTOGRAM_BUCKETS,
    bucket_field,
)
from django_ratequeue.plugins.rollups.pruning import prune_rollups
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import freeze, leading_loop, run_pass

# A multiple of 420 minutes since the epoch, so of every step of 1 to 7 minutes.
T0 = datetime.fromtimestamp(datetime(2026, 11, 23, tzinfo=UTC).timestamp() // 25200 * 25200, UTC)


def minute_row(queue: str, minute: datetime, waits: tuple[float, ...] = (), **counts: int) -> None:
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
    minute_row("a", T0, completed=3, enqueued=4, waits=(0.2, 0.3))
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
    assert points[0].wait_p50 is not None and points[0].wait_p99 is not None
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
def test_series_by_queue_sums_each_point_in_one_query(
    django_assert_num_queries: Any,
) -> None:
    """Points of several minutes are summed by the database (counts and histograms, so
    a point's percentiles are those of all its minutes' samples), on either side of a
    point's edge, for each queue asked for in one query; a queue with no figures has
    zeros."""
    step = timedelta(minutes=15)
    waits_a = (0.002, 0.004, 0.5, 2.0, 9.0)
    for n, wait in enumerate(waits_a):  # the first point's minutes 0, 3, 6, 9, 12
        minute_row("a", T0 + timedelta(minutes=3 * n), completed=n + 1, waits=(wait,))
    minute_row("a", T0 + timedelta(minutes=14), failed=1)  # the first point's last minute
    minute_row("a", T0 + timedelta(minutes=15), failed=10)  # the second point's first
    minute_row("b", T0 + timedelta(minutes=29), started=4, tokens_spent=3)
    minute_row("c", T0 + timedelta(minutes=20), started=99)  # not asked for

    with django_assert_num_queries(1):
        found = series_by_queue(
            ["a", "b", "idle"], T0 + timedelta(minutes=7), T0 + timedelta(minutes=40), step
        )
    assert set(found) == {"a", "b", "idle"}
    a, b, idle = found["a"], found["b"], found["idle"]
    assert [p.start for p in a] == [T0 + step * n for n in range(3)]
    assert [(p.completed, p.failed) for p in a] == [(15, 1), (0, 10), (0, 0)]
    assert [(p.started, p.tokens_spent) for p in b] == [(0, 0), (4, 3), (0, 0)]
    assert all(p.started == p.completed == 0 and p.wait_p50 is None for p in idle)
    assert a[0].wait_p50 is not None and a[0].wait_p99 is not None
    assert bucket_of(a[0].wait_p50) == bucket_of(reference(list(waits_a), 0.5))
    assert bucket_of(a[0].wait_p99) == bucket_of(reference(list(waits_a), 0.99))
    # The one-queue form is the same read.
    assert series("a", T0 + timedelta(minutes=7), T0 + timedelta(minutes=40), step) == a
    assert series_by_queue([], T0, T0 + timedelta(minutes=40), step) == {}


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


@settings(max_examples=200, deadline=None)
@given(
    samples=st.lists(st.floats(min_value=0, max_value=1e5), min_size=1, max_size=300),
    fraction=st.sampled_from([0.01, 0.5, 0.95, 0.99, 1.0]),
)
def test_percentiles_fall_in_the_bucket_of_the_sorted_lists(
    samples: list[float], fraction: float
) -> None:
    buckets = [0] * HISTOGRAM_BUCKETS
    for sample in samples:
        buckets[bucket_of(sample)] += 1
    estimate = percentile(buckets, fraction)
    assert estimate is not None
    assert bucket_of(estimate) == bucket_of(reference(samples, fraction))
    # Several read in one walk are each the one read alone.
    fractions = (0.01, 0.5, 0.95, 0.99, 1.0)
    assert percentiles(buckets, fractions) == [percentile(buckets, f) for f in fractions]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.integers(0, 40),  # the step's minute after T0
            st.sampled_from(["started", "completed", "tokens_spent"]),
            st.integers(1, 5),
        ),
        max_size=30,
    ),
    since=st.integers(0, 40),
    span=st.integers(0, 40),
    width=st.integers(1, 7),
    queue=st.sampled_from(["a", None]),
)
@pytest.mark.django_db
def test_series_sums_what_the_steps_wrote(
    events: list[tuple[str, int, str, int]],
    since: int,
    span: int,
    width: int,
    queue: str | None,
) -> None:
    """Steps written one UPSERT each, read back as a series of any step: each point is the
    sum of its minutes."""
    QueueMinute.objects.all().delete()
    for name, minute, figure, number in events:
        tally = Tally(T0 + timedelta(minutes=minute, seconds=30))
        tally.count(name, figure, number)
        tally.write()
    step = timedelta(minutes=width)
    points = series(
        queue, T0 + timedelta(minutes=since), T0 + timedelta(minutes=since + span), step
    )
    first = T0 + timedelta(minutes=since // width * width)
    assert [p.start for p in points] == [first + step * n for n in range(len(points))]
    assert points[-1].start <= T0 + timedelta(minutes=since + span) < points[-1].start + step
    for point in points:
        for figure in ("started", "completed", "tokens_spent"):
            expected = sum(
                number
                for name, minute, counted, number in events
                if counted == figure
                and queue in (None, name)
                and point.start <= T0 + timedelta(minutes=minute) < point.start + step
            )
            assert getattr(point, figure) == expected


# -- kept by the loop ----------------------------------------------------------------------


def table_figures() -> dict[str, dict[str, int]]:
    """Per queue, what the jobs and attempts tables say the rollups must hold (for a run
    where no attempt was released and no job was canceled while it had a retry due)."""
    figures: dict[str, dict[str, int]] = {}
    for job in Job.objects.all():
        queue = figures.setdefault(job.queue, dict.fromkeys(FIGURES, 0))
        queue["enqueued"] += 1
        if job.status in FINAL_FIGURES:
            queue[FINAL_FIGURES[job.status]] += 1
    for attempt in Attempt.objects.select_related("job"):
        queue = figures[attempt.queue]
        queue["started"] += 1
        queue["ran"] += attempt.started_at is not None
        queue["retried"] += attempt.number < attempt.job.attempts
    return figures


def rollup_figures() -> dict[str, dict[str, int]]:
    """Per queue, the rollups summed (``ran``: the run-time samples)."""
    figures: dict[str, dict[str, int]] = {}
    for row in QueueMinute.objects.all():
        queue = figures.setdefault(row.queue, dict.fromkeys(FIGURES, 0))
        for name in FIGURES[:-1]:
            queue[name] += getattr(row, name)
        queue["ran"] += sum(getattr(row, bucket_field("run", b)) for b in range(HISTOGRAM_BUCKETS))
        waited = sum(getattr(row, bucket_field("wait", b)) for b in range(HISTOGRAM_BUCKETS))
        assert waited == row.started  # one wait per start
    return figures


FIGURES = ["enqueued", "started", "completed", "failed", "retried", "canceled", "ran"]


@pytest.mark.django_db
def test_the_rollups_say_what_the_tables_say_after_a_mixed_run(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    limits = {"small": {"kind": "token bucket", "rate": 60, "period": 60, "max_reserved": 5}}
    settings.RATEQUEUE = {
        **settings.RATEQUEUE,
        "RATE_LIMITS": limits,
        "QUEUES": {"gated": {"rate_limit": "small"}},
    }
    frozen = freeze(monkeypatch)
    quick: Any = {"retry_count": 2, "initial_interval": 1, "randomize_interval": False}
    for n in range(5):
        enqueue(jobs.add, args=[n, n], queue="a", on_complete=jobs.echo)
    for _ in range(3):
        enqueue(jobs.fail, queue="b", retries=quick)
    enqueue(jobs.fail_hard, queue="b")
    later = [enqueue(jobs.add, args=[1, 1], queue="a", run_after=600) for _ in range(3)]
    gated = [enqueue(jobs.add, args=[1, 1], queue="gated") for _ in range(4)]
    frozen.advance(0.5)
    run_pass()
    for handle in later[:2]:
        handle.cancel()
    for _ in range(50):  # back-offs come due and rate-limit tokens refill
        if not Job.objects.exclude(pk=later[2].id).exclude(status__in=FINAL_STATUSES).exists():
            break
        frozen.advance(1.5)
        run_pass()
    frozen.advance(ARRIVALS_SETTLE.total_seconds() + 1)
    run_pass()
    frozen.advance(ARRIVALS_SETTLE.total_seconds() + 1)
    run_pass()  # counts the callbacks the last pass enqueued

    assert Job.objects.filter(queue="gated", status="complete").count() == len(gated)
    assert rollup_figures() == table_figures()
    expected = table_figures()
    assert expected["b"] == {
        "enqueued": 4,
        "started": 10,
        "completed": 0,
        "failed": 4,
        "retried": 6,
        "canceled": 0,
        "ran": 10,
    }
    assert expected["a"]["canceled"] == 2 and expected["default"]["enqueued"] == 5
    tokens = QueueMinute.objects.filter(queue="gated").aggregate(
        reserved=Sum("tokens_reserved"), spent=Sum("tokens_spent")
    )
    assert tokens == {"reserved": 4, "spent": 4}
    # The series agrees, and a rate-gated job's wait counts its wait for tokens.
    points = series("gated", frozen.now() - timedelta(hours=1), frozen.now())
    assert sum(p.started for p in points) == sum(p.tokens_spent for p in points) == 4
    assert max(p.wait_p99 or 0 for p in points) >= 1


@pytest.mark.django_db
def test_a_step_that_rolls_back_counts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = freeze(monkeypatch)
    # At a minute's start: the job's arrival and its start then fall in the same minute.
    frozen.moment = floor_minute(frozen.moment) + timedelta(minutes=1)
    loop = leading_loop()
    loop.step()  # counting arrivals starts
    enqueue(jobs.add, args=[1, 1])
    frozen.advance(ARRIVALS_SETTLE.total_seconds() + 1)
    resting_state = Rest.resting_state

    def broken(*args: Any) -> None:
        raise DatabaseError("the step breaks after dispatching")

    monkeypatch.setattr(Rest, "resting_state", broken)
    with pytest.raises(DatabaseError):
        loop.step()
    assert not QueueMinute.objects.exists()
    monkeypatch.setattr(Rest, "resting_state", resting_state)
    loop.step()
    (row,) = QueueMinute.objects.all()
    assert (row.enqueued, row.started, row.queue) == (1, 1, "default")


@pytest.mark.django_db
def test_figures_are_kept_for_rollup_retention(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "ROLLUP_RETENTION": timedelta(days=2)}
    now = floor_minute(timezone.now())
    for days in (3, 3, 1):
        minute_row("a", now - timedelta(days=days, minutes=QueueMinute.objects.count()))
    assert prune_rollups(1) == 1  # the loop's background batch
    call_command("ratequeue_prune", stdout=StringIO())
    assert [row.minute for row in QueueMinute.objects.all()] == [
        now - timedelta(days=1, minutes=2)
    ]


def test_a_cluster_keeps_the_rollups_of_what_it_ran(cluster: Any) -> None:
    """Real workers: the rollups end up saying what the tables say, arrivals included
    (the resting loop wakes to count them once they are ARRIVALS_SETTLE old)."""
    cluster(QUEUES={"pair": {"max_concurrency": 2}})
    quick: Any = {"retry_count": 1, "initial_interval": 0.1, "randomize_interval": False}
    handles: list[Any] = [enqueue(jobs.add, args=[n, n], queue="pair") for n in range(8)]
    handles += [enqueue(jobs.fail, retries=quick) for _ in range(2)]
    handles.append(enqueue(jobs.fail_hard, queue="pair"))
    later = enqueue(jobs.add, args=[1, 1], run_after=3600)
    later.cancel()
    wait_for(
        lambda: all(handle.status() in FINAL_FIGURES for handle in [*handles, later]),
        30,
        "every job to finish",
    )
    settled = ARRIVALS_SETTLE.total_seconds() + 20
    wait_for(
        lambda: rollup_figures() == table_figures(),
        settled,
        "the rollups to say what the tables say",
    )
    assert table_figures()["default"]["retried"] == 2


@pytest.mark.django_db
def test_a_loop_that_was_down_counts_the_arrivals_step_by_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen = freeze(monkeypatch)
    leading_loop().step()  # counting arrivals starts
    for minutes in (0, 30, 59):
        enqueue(jobs.add, args=[1, 1], queue="q", run_after=86400)
        frozen.advance(minutes * 60)
    frozen.advance(3600)
    loop = leading_loop()  # a new pass reads where counting stopped
    loop.step()
    assert loop.more_work  # an hour to catch up, a window per step
    loop.run(30)
    assert sum(QueueMinute.objects.values_list("enqueued", flat=True)) == 3
    assert RollupCursor.objects.get().arrivals_until == settled_until(frozen.now())

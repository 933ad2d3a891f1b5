"""One clock for every host: a process whose own clock is off by seconds neither takes live
workers or passes for dead nor bends a rate limit, because the times it writes and
compares are the database server's (:mod:`django_ratequeue.clock`).

``skewed_clock`` sets this process's clock off, as on a host whose clock is wrong: Python's
``time.time`` and Django's ``timezone.now``; the database server keeps its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_ratequeue import TokenBucket, enqueue, rate_limit
from django_ratequeue.engine.agent import take_lapsed_lease
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.models import Attempt, LoopState, WorkerHeartbeat
from django_ratequeue.ratelimit.prune import prune_full_rows
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = pytest.mark.django_db


@contextmanager
def skewed_clock(seconds: float) -> Iterator[None]:
    real_time, real_ns = time.time, time.time_ns
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: real_time() + seconds)
        patch.setattr(time, "time_ns", lambda: real_ns() + int(seconds * 1e9))
        patch.setattr(timezone, "now", lambda: datetime.fromtimestamp(time.time(), tz=UTC))
        yield


def test_the_clock_is_the_database_servers() -> None:
    from django_ratequeue import clock  # here: the tests below also run without it

    with skewed_clock(3600):
        skewed = clock.timestamp()
    assert abs(skewed - time.time()) < 1
    with skewed_clock(-3600):
        assert abs(clock.now().timestamp() - time.time() - 3600) < 1  # as seen from here
    # On the database's host (and on SQLite) the offset is within the measurement's error,
    # so it is none: our stamps and the local clock agree exactly.
    before = time.time()
    stamp = clock.timestamp()
    assert before <= stamp <= time.time()


def test_a_worker_whose_clock_is_behind_is_not_taken_for_dead(tmp_path: Path) -> None:
    handle = enqueue(jobs.record, args=[str(tmp_path / "runs.log"), "x"])
    leading_loop().step()  # dispatches the job
    with skewed_clock(-30):  # WORKER_DEAD_AFTER is 10 s
        worker = beat(force=True)
        Attempt.objects.update(worker=worker, started_at=timezone.now())
    leading_loop().step()  # recovery looks at the heartbeat
    (attempt,) = handle.attempts()
    assert attempt.ended_at is None and attempt.outcome == ""
    assert WorkerHeartbeat.objects.get(pk=worker).seen_at > timezone.now() - timedelta(seconds=1)


def test_a_leader_on_a_host_whose_clock_is_behind_is_not_taken_over() -> None:
    with skewed_clock(-5):
        live = take_lapsed_lease()  # a leader (and its lease) on that host
    assert live is not None
    assert take_lapsed_lease() is None  # another host looks: the lease was just renewed
    assert LoopState.objects.ensure().generation == live.generation


def test_a_host_whose_clock_is_behind_cannot_make_a_limit_over_admit() -> None:
    five_a_minute = TokenBucket(rate=5, period=60)
    with skewed_clock(-30):
        assert all(rate_limit("skew", config=five_a_minute).ok for _ in range(5))
    assert not rate_limit("skew", config=five_a_minute).ok  # 30 s of refills never happened


def test_a_host_whose_clock_is_ahead_does_not_stop_refills_for_the_others() -> None:
    ten_a_second = TokenBucket(rate=10, period=1, capacity=1)
    with skewed_clock(5):
        assert rate_limit("skew", config=ten_a_second).ok
    # The token comes back after 0.1 s; on the ahead host's clock it would take 5.1 s.
    wait_for(lambda: rate_limit("skew", config=ten_a_second).ok, timeout=3, message="a refill")


def test_a_host_whose_clock_is_ahead_prunes_no_limit_that_is_not_full(settings: Any) -> None:
    """Pruning forgets rows that are full again, judged on the consumes' clock: a host two
    hours ahead would otherwise find the hour's spent token refilled, and give it again."""
    hourly = {"kind": "token bucket", "rate": 1, "period": 3600}
    limits = {**settings.RATEQUEUE.get("RATE_LIMITS", {}), "hourly": hourly}
    settings.RATEQUEUE = {**settings.RATEQUEUE, "RATE_LIMITS": limits}
    assert rate_limit("hourly").ok
    with skewed_clock(7200):
        assert prune_full_rows() == 0
    assert not rate_limit("hourly").ok

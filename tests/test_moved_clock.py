"""Tests that move time (time-machine): with ``RATEQUEUE["CLOCK"] = "local"`` every time
ratequeue reads moves with the test's clock (rate limits, enqueue, the loop's scheduled
starts and retries, heartbeats and leases, results); with the default, the database's
clock, none does, since the database server's clock does not move."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_ratequeue import JobFailed, Status, TokenBucket, clock, enqueue, rate_limit
from tests.queue import jobs
from tests.queue.steps import run_pass

pytestmark = pytest.mark.django_db

# Where the tests travel: a day ahead, so that nothing of the real time can pass for it.
AHEAD = timedelta(days=1)


def test_the_databases_clock_does_not_move_with_the_test() -> None:
    before = time.time()
    with time_machine.travel(datetime.now(tz=UTC) + AHEAD, tick=False):
        assert clock.timestamp() < before + 60


def test_the_local_clock_moves_with_the_test(local_clock: None) -> None:
    there = datetime.now(tz=UTC).replace(microsecond=0) + AHEAD
    with time_machine.travel(there, tick=False) as traveller:
        assert clock.now() == there
        traveller.shift(timedelta(minutes=5))
        assert clock.now() == there + timedelta(minutes=5)


def test_rate_limits_refill_on_the_moved_clock(local_clock: None) -> None:
    """The example of docs/testing.md."""
    hourly = TokenBucket(rate=1, period=3600)
    with time_machine.travel("2030-01-01 12:00Z", tick=False) as traveller:
        assert rate_limit("exports", key="user:1", config=hourly).ok
        refused = rate_limit("exports", key="user:1", config=hourly)
        assert not refused.ok and refused.retry_after == 3600
        assert refused.retry_at == datetime(2030, 1, 1, 13, tzinfo=UTC)
        traveller.shift(timedelta(minutes=59))
        assert not rate_limit("exports", key="user:1", config=hourly).ok
        traveller.shift(timedelta(minutes=1))
        assert rate_limit("exports", key="user:1", config=hourly).ok


def test_the_loop_starts_scheduled_jobs_and_retries_on_the_moved_clock(
    local_clock: None,
) -> None:
    """An hour's wait, and a retry's ten-minute back-off, passed in an instant: the loop,
    the runner's heartbeat and the handles all read the moved clock."""
    retry = {"retry_count": 1, "initial_interval": 600, "randomize_interval": False}
    with time_machine.travel(datetime.now(tz=UTC) + AHEAD, tick=False) as traveller:
        later = enqueue(jobs.add, args=[1, 2], run_after=3600)
        flaky = enqueue(jobs.fail, args=["twice"], retries=retry)
        run_pass()  # the flaky job runs and fails
        run_pass()  # its failure is taken in
        assert (later.status(), flaky.status()) == (Status.SCHEDULED, Status.RETRYING)
        traveller.shift(timedelta(minutes=10))
        run_pass()
        run_pass()
        assert (later.status(), flaky.status()) == (Status.SCHEDULED, Status.FAILED)
        with pytest.raises(JobFailed, match="twice"):
            flaky.result(timeout=5)
        traveller.shift(timedelta(minutes=50))
        run_pass()
        run_pass()
        assert later.result(timeout=5) == 3
    (attempt,) = later.attempts()
    assert attempt.started_at is not None
    assert attempt.started_at >= datetime.now(tz=UTC) + AHEAD - timedelta(minutes=1)

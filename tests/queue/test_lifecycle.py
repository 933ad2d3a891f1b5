"""Jobs through a real qcluster: results, retries, callbacks, cancellation, scheduling."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from django_ratequeue import (
    JobCanceled,
    JobFailed,
    Status,
    cancel_all,
    enqueue,
    enqueue_many,
    get_handle,
)
from django_ratequeue.models import Job
from tests.cluster import wait_for
from tests.queue import jobs

NO_JITTER = {"initial_interval": 0.2, "backoff_factor": 2, "randomize_interval": False}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_results_handles_bulk_and_callbacks(cluster, tmp_path: Path) -> None:
    cluster()
    calls = tmp_path / "callbacks.jsonl"
    with transaction.atomic():
        added = enqueue(
            jobs.add, args=[2, 3], on_complete=jobs.callback, context={"path": str(calls)}
        )
    echoed = enqueue(jobs.echo, args=[1], kwargs={"word": "two"}, owner="alice")
    decorated = jobs.decorated.enqueue(21)
    many = enqueue_many(jobs.add, [[1, 1], [2, 2], [3, 3]], id="sum")
    failing = enqueue(
        jobs.fail,
        args=["bad input"],
        retries=0,
        on_complete="tests.queue.jobs.callback",
        context={"path": str(calls), "n": 2},
    )

    assert added.result(timeout=30) == 5
    assert get_handle(echoed.id, owner="alice").result(timeout=30) == {
        "args": [1],
        "kwargs": {"word": "two"},
    }
    with pytest.raises(Job.DoesNotExist):
        get_handle(echoed.id, owner="mallory")
    assert decorated.result(timeout=30) == 42
    assert [h.id for h in many] == ["sum-0", "sum-1", "sum-2"]
    assert [get_handle(f"sum-{i}").result(timeout=30) for i in range(3)] == [2, 4, 6]
    with pytest.raises(JobFailed, match="ValueError: bad input") as failed:
        failing.result(timeout=30)
    assert "Traceback" in failed.value.traceback
    assert added.status() == Status.COMPLETE and failing.status() == Status.FAILED
    (attempt,) = added.attempts()
    assert attempt.outcome == "succeeded" and attempt.started_at <= attempt.ended_at

    wait_for(lambda: len(lines(calls)) == 2, message="two callbacks")
    outcomes = {o["job_id"]: o for o in map(json.loads, lines(calls))}
    assert outcomes[added.id] == {
        "job_id": added.id,
        "status": "complete",
        "result": 5,
        "error": None,
        "context": {"path": str(calls)},
    }
    assert outcomes[failing.id]["status"] == "failed"
    assert outcomes[failing.id]["error"] == "ValueError: bad input"
    assert outcomes[failing.id]["context"]["n"] == 2


def test_retries_back_off_then_fail(cluster, tmp_path: Path) -> None:
    cluster()
    log = tmp_path / "attempts.log"
    retried = enqueue(
        jobs.fail_then_record, args=[str(log), "r"], retries={"retry_count": 3, **NO_JITTER}
    )
    final = enqueue(jobs.fail_hard, retries=5)

    with pytest.raises(JobFailed, match="attempt of r failed"):
        retried.result(timeout=30)
    times = [float(line.split()[1]) for line in lines(log)]
    assert len(times) == 4
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Never earlier than the back-off (0.2, 0.4, 0.8 s), and growing.
    assert all(gap >= delay - 0.01 for gap, delay in zip(gaps, [0.2, 0.4, 0.8], strict=True))
    assert gaps[2] > gaps[0], gaps
    assert [a.number for a in retried.attempts()] == [1, 2, 3, 4]
    assert {a.outcome for a in retried.attempts()} == {"failed"}

    with pytest.raises(JobFailed, match="NonRetryableError: no point retrying"):
        final.result(timeout=30)
    assert len(final.attempts()) == 1


def test_cancel_before_and_during_a_run(cluster, tmp_path: Path) -> None:
    cluster()
    started, release = tmp_path / "started.log", tmp_path / "release"
    calls = tmp_path / "callbacks.jsonl"
    scheduled = enqueue(
        jobs.add,
        args=[1, 2],
        start_at=timezone.now() + timedelta(hours=1),
        on_complete=jobs.callback,
        context={"path": str(calls)},
    )
    paused = [enqueue(jobs.add, args=[1, 2], queue={"name": "paused", "max_concurrency": 0})]
    running = enqueue(
        jobs.block_until_file,
        args=[str(started), str(release)],
        retries=3,
        on_complete=jobs.callback,
        context={"path": str(calls)},
    )
    wait_for(lambda: lines(started), message="the blocking job to start")

    scheduled.cancel()
    cancel_all(queue="paused")
    running.cancel()
    with pytest.raises(JobCanceled):
        scheduled.result(timeout=30)
    with pytest.raises(JobCanceled):
        paused[0].result(timeout=30)
    assert running.status() == Status.RUNNING
    release.touch()
    with pytest.raises(JobCanceled):
        running.result(timeout=30)
    assert len(running.attempts()) == 1 and len(lines(started)) == 1
    assert scheduled.attempts() == [] and paused[0].attempts() == []
    wait_for(lambda: len(lines(calls)) == 2, message="two canceled callbacks")
    assert {json.loads(line)["status"] for line in lines(calls)} == {"canceled"}


def test_scheduled_start_and_priority_order(cluster, tmp_path: Path) -> None:
    cluster(workers=1, MAX_CONCURRENCY=1)
    log, started, release = tmp_path / "order.log", tmp_path / "started", tmp_path / "release"
    blocker = enqueue(jobs.block_until_file, args=[str(started), str(release)])
    wait_for(lambda: lines(started), message="the blocker to start")
    low = enqueue(jobs.record, args=[str(log), "low"], priority=-5)
    normal = enqueue(jobs.record, args=[str(log), "normal"])
    high = enqueue(jobs.record, args=[str(log), "high"], priority=10)
    due = timezone.now() + timedelta(seconds=1)
    later = enqueue(jobs.record, args=[str(log), "later"], start_at=due, priority=100)
    assert later.status() == Status.SCHEDULED
    release.touch()
    for handle in (blocker, low, normal, high, later):
        handle.result(timeout=30)
    order = [line.split()[0] for line in lines(log)]
    assert [label for label in order if label != "later"] == ["high", "normal", "low"]
    # The highest priority of all, but not before its time.
    assert later.attempts()[0].started_at >= due


def test_timeout_fails_the_attempt(cluster) -> None:
    cluster()
    slow = enqueue(jobs.sleep, args=[30], timeout=0.3, retries=0)
    with pytest.raises(JobFailed, match=r"timeout of 0\.3 seconds"):
        slow.result(timeout=30)
    assert slow.attempts()[0].outcome == "timed_out"
    assert Job.objects.get(pk=slow.id).status == Status.FAILED


def test_queue_rate_limit_spaces_starts(cluster, tmp_path: Path) -> None:
    cluster(
        RATE_LIMITS={"api": {"kind": "token bucket", "rate": 2, "period": 1}},
        QUEUES={"api": {"max_concurrency": 5, "rate_limit": "api"}},
    )
    log = tmp_path / "calls.log"
    handles = enqueue_many(jobs.record, [[str(log), f"c{i}"] for i in range(4)], queue="api")
    free = enqueue(jobs.record, args=[str(log), "free"], cost=0, queue="api")
    for handle in [*handles, free]:
        handle.result(timeout=30)
    # When the loop let each job start (workers may pick them up a little later).
    starts = sorted(a.dispatched_at for h in handles for a in h.attempts())
    # Two start at once from the full bucket; the others wait for a token each (0.5 s).
    assert (starts[2] - starts[0]).total_seconds() > 0.4
    assert (starts[3] - starts[0]).total_seconds() > 0.9

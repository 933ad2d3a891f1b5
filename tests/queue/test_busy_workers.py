"""The loop keeps going while every worker runs a slow job, and the leader finds work whose
signal was lost; the fast enqueue path (prepared INSERT, async commit)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from django_ratequeue import JobCanceled, Status, enqueue
from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.models import LoopStatus
from django_ratequeue.engine.options import JobOptions
from django_ratequeue.models import Job, LoopState
from tests.cluster import wait_for
from tests.queue import jobs


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_cancels_and_starts_go_on_while_every_worker_is_busy(cluster, tmp_path: Path) -> None:
    cluster(workers=2, MAX_CONCURRENCY=2, SLOTS=1)  # every worker busy: one slot each
    started, release = tmp_path / "started.log", tmp_path / "release"
    slow = [
        enqueue(jobs.block_until_file, args=[str(started), str(release), 60]) for _ in range(2)
    ]
    wait_for(lambda: len(lines(started)) == 2, message="both slow jobs to start")
    assert len({line.split()[2] for line in lines(started)}) == 2, "one per worker"

    waiting = enqueue(jobs.add, args=[1, 2])
    kept = enqueue(jobs.add, args=[3, 4])
    waiting.cancel()
    late = enqueue(jobs.add, args=[5, 6])
    late.cancel()
    # Both workers are still busy: only a pass outside django-q2's workers can apply these.
    wait_for(
        lambda: waiting.status() == late.status() == Status.CANCELED,
        message="the cancels to be applied while both workers are busy",
    )
    assert [h.status() for h in slow] == [Status.RUNNING, Status.RUNNING]
    assert not release.exists()
    assert kept.status() == Status.WAITING

    release.touch()
    assert [h.result(timeout=30) for h in slow] == ["released", "released"]
    assert kept.result(timeout=30) == 7
    with pytest.raises(JobCanceled):
        waiting.result(timeout=5)
    assert waiting.attempts() == [] and late.attempts() == []


def insert_without_kick(*args: int) -> Handle:
    """A committed WAITING job that raised no signal (as if its NOTIFY were lost)."""
    template = JobOptions().template("tests.queue.jobs.add")
    row = template.job(list(args), {}, template.stamp(timezone.now()))
    row.save(force_insert=True)
    return Handle(row.id)


def test_the_leader_finds_work_whose_signal_was_lost(cluster) -> None:
    cluster()
    assert enqueue(jobs.add, args=[1, 1]).result(timeout=30) == 2
    state = LoopState.objects.values_list("state", flat=True)
    wait_for(lambda: state.get() == LoopStatus.IDLE, message="the loop to rest idle")
    assert insert_without_kick(2, 2).result(timeout=30) == 4

    later = enqueue(jobs.add, args=[0, 0], start_at=timezone.now() + timedelta(hours=1))
    wait_for(lambda: state.get() == LoopStatus.SCHEDULED, message="the loop to rest scheduled")
    assert insert_without_kick(3, 3).result(timeout=30) == 6
    assert later.status() == Status.SCHEDULED


def test_many_enqueues_in_one_session_then_run(cluster, settings) -> None:
    """The prepared INSERT from the second use on; with ENQUEUE_ASYNC_COMMIT too."""
    handles = [enqueue(jobs.add, args=[i, i]) for i in range(3)]
    settings.RATEQUEUE = {**settings.RATEQUEUE, "ENQUEUE_ASYNC_COMMIT": True}
    handles += [enqueue(jobs.add, args=[i, i], priority=1) for i in range(3, 6)]
    assert Job.objects.filter(pk__in=[h.id for h in handles]).count() == 6
    assert Job.objects.get(pk=handles[-1].id).priority == 1
    cluster()
    assert [h.result(timeout=30) for h in handles] == [0, 2, 4, 6, 8, 10]


def test_jobs_enqueued_one_after_another_are_not_left_for_the_leaders_next_look(
    cluster,
) -> None:
    """Each enqueue wakes the resting leader (a signal on PostgreSQL, a poll of SQLite's
    data version): with WATCHDOG_INTERVAL this long, forty jobs found only when the leader
    renews its lease would take two minutes."""
    cluster(WATCHDOG_INTERVAL=3.0, LOOP_LEASE=10.0, SEGMENT=0.1)
    for i in range(40):
        assert enqueue(jobs.add, args=[i, i]).result(timeout=5) == 2 * i

"""The promised start (``Handle.eta()``), step by step with the queue's clock stopped,
against a reference model: the jobs ahead in the order the loop starts them, the slots
that free a mean run time after their attempts started, the schedule, the pause, the rate
limit and its reservations."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from django_ratequeue import Eta, Handle, Status, enqueue
from django_ratequeue.control import pause_queue, resume_queue
from django_ratequeue.engine import hooks
from django_ratequeue.engine.fairness.keylimits import set_key_limit
from django_ratequeue.engine.fairness.keys import ready_key
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.exceptions import JobDoesNotExist
from django_ratequeue.models import Attempt, Job
from django_ratequeue.plugins.eta.estimates import job_etas
from django_ratequeue.plugins.rollups.counting import Tally
from django_ratequeue.plugins.rollups.runtimes import RUN_TIME_WINDOW
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop
from tests.ratelimit import plans

pytestmark = pytest.mark.django_db

TWO_SLOTS = {"QUEUES": {"line": {"max_concurrency": 2}}}
SLOW = {"kind": "token bucket", "rate": 1, "period": 10}
GATED = {
    "RATE_LIMITS": {"slow": SLOW},
    "QUEUES": {"gated": {"rate_limit": "slow", "max_concurrency": 10}},
}


@pytest.fixture(autouse=True)
def worker_alive() -> None:
    """A django-q2 worker is alive (this process beats as its agent would): estimates count
    on it (without one the basis is "no_worker", tests/queue/test_no_worker.py)."""
    beat(force=True)


def reference_positions() -> dict[str, int]:
    """The jobs ahead of each WAITING job in its queue and key, by the loop's order."""
    waiting = list(Job.objects.filter(status=Status.WAITING))
    return {
        job.pk: sum(
            other.queue == job.queue
            and other.concurrency_key == job.concurrency_key
            and ready_key(other) < ready_key(job)
            for other in waiting
        )
        for job in waiting
    }


def record_run_time(queue: str, seconds: float, at: datetime, runs: int = 10) -> None:
    """Count ``runs`` attempts of ``seconds`` each in ``queue``'s rollups, as the loop does."""
    tally = Tally(at)
    for _ in range(runs):
        tally.run(queue, at - timedelta(seconds=seconds), at)
    tally.write()


def step(clock: Clock, seconds: float = 0.0) -> None:
    """Move the clock, then run one step of the loop in a live worker (its agent beats)."""
    clock.advance(seconds)
    beat(force=True)
    leading_loop().step()


@override_settings(RATEQUEUE={"QUEUES": {"line": {"max_concurrency": 1}}})
def test_positions_follow_the_order_the_loop_starts_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Priorities and keys mixed: each job's position is the reference's, and the job the
    loop starts next in a key is always the one with nobody ahead."""
    clock = freeze(monkeypatch)
    draw = random.Random(24)
    handles: list[Handle[Any]] = []
    for _ in range(30):
        clock.advance(0.001)
        key = draw.choice(["", "a", "b"])
        start_at = clock.now() - timedelta(seconds=draw.choice([0, 5, 60]))
        priority = draw.choice([0, 0, 1, -1])
        handles.append(
            enqueue(
                jobs.add,
                args=[1, 1],
                queue="line",
                concurrency_key=key,
                priority=priority,
                start_at=start_at,
            )
        )
    for _ in range(10):
        expected = reference_positions()
        etas = {h.id: h.eta() for h in handles if h.id in expected}
        assert {id: eta.position for id, eta in etas.items()} == expected
        heads = {id for id, position in expected.items() if position == 0}
        step(clock, 0.01)
        started = set(Attempt.objects.filter(active=True).values_list("job_id", flat=True))
        assert started and started <= heads
        Attempt.objects.filter(active=True).update(
            active=False, started_at=clock.now(), ended_at=clock.now()
        )
        Job.objects.filter(status=Status.RUNNING).update(status=Status.COMPLETE)


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_a_free_slot_starts_it_now_else_the_throughput_tells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two slots, runs of 10 s: the first two start now; behind them, each job takes the
    slot that frees next, a run after the one before it on that slot."""
    clock = freeze(monkeypatch)
    first = [enqueue(jobs.add, args=[i, i], queue="line") for i in range(2)]
    t0 = clock.now()
    assert [h.eta().estimated_start for h in first] == [t0, t0]
    assert {h.eta().basis for h in first} == {"throughput"}
    behind = []
    for i in range(5):
        clock.advance(0.001)  # created one after the other
        behind.append(enqueue(jobs.add, args=[i, i], queue="line"))
    # Behind two jobs, with two slots free but no run time measured yet: no estimate.
    assert behind[0].eta() == Eta(2, clock.now(), None, "unknown")
    record_run_time("line", 10, t0)
    step(clock)  # the first two start
    dispatched = clock.now()
    clock.advance(4)  # 6 s left of their runs
    positions = [h.eta().position for h in behind]
    assert positions == [0, 1, 2, 3, 4]
    starts = [h.eta().estimated_start for h in behind]
    # The reference: two slots free at t0 + 10 s, then every 10 s after.
    slot_free = dispatched + timedelta(seconds=10)
    assert starts == [slot_free + timedelta(seconds=10 * (p // 2)) for p in positions]
    assert all(h.eta().earliest_start == clock.now() for h in behind)
    # Past the mean run time, a slot is due any moment: now, not in the past.
    clock.advance(20)
    beat(force=True)  # the worker beat meanwhile, as a live one does
    assert behind[0].eta().estimated_start == clock.now()


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_each_start_behind_a_slot_adds_the_runners_hand_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The running attempts waited 0.5 s from dispatch to their start: each job ahead
    that takes a slot after them waits as long before it runs."""
    clock = freeze(monkeypatch)
    record_run_time("line", 10, clock.now())
    handles = []
    for i in range(5):
        clock.advance(0.001)
        handles.append(enqueue(jobs.add, args=[i, i], queue="line"))
    step(clock)  # the first two are dispatched
    dispatched = clock.now()
    started = dispatched + timedelta(seconds=0.5)
    Attempt.objects.filter(active=True).update(started_at=started, worker="runner")
    clock.advance(1)
    run, handoff = timedelta(seconds=10), timedelta(seconds=0.5)
    # Reference: slot k frees at started + 10 s; the job at position p takes a slot after
    # p // 2 more runs, each a hand-off and a run, and starts a hand-off after that.
    expected = [started + run + (p // 2) * (handoff + run) + handoff for p in range(3)]
    assert [h.eta().estimated_start for h in handles[2:]] == expected


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_the_run_time_is_the_recent_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of 2 s recently, of 100 s long ago: the recent ones count."""
    clock = freeze(monkeypatch)
    record_run_time("line", 100, clock.now() - RUN_TIME_WINDOW - timedelta(minutes=5))
    record_run_time("line", 2, clock.now())
    for i in range(3):
        clock.advance(0.001)
        enqueue(jobs.add, args=[i, i], queue="line")
    step(clock)
    last = Job.objects.get(status=Status.WAITING)
    assert job_etas([last])[last.pk].estimated_start == clock.now() + timedelta(seconds=2)


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_without_a_plugin_that_knows_run_times_the_throughput_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rollups give the run times (hooks.set_run_times): without them, as without rows."""
    clock = freeze(monkeypatch)
    record_run_time("line", 2, clock.now())
    for i in range(3):
        clock.advance(0.001)
        enqueue(jobs.add, args=[i, i], queue="line")
    step(clock)
    last = Job.objects.get(status=Status.WAITING)
    assert job_etas([last])[last.pk].basis == "throughput"
    monkeypatch.setattr(hooks, "_run_times", None)
    assert job_etas([last])[last.pk] == Eta(0, clock.now(), None, "unknown")


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_a_scheduled_job_starts_at_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = freeze(monkeypatch)
    at = clock.now() + timedelta(minutes=5)
    handle = enqueue(jobs.add, args=[1, 1], queue="line", start_at=at)
    assert handle.status() == Status.SCHEDULED
    assert handle.eta() == Eta(0, at, at, "schedule")


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_a_paused_queue_promises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    freeze(monkeypatch)
    handles = [enqueue(jobs.add, args=[i, i], queue="line") for i in range(2)]
    pause_queue("line")
    assert handles[0].eta().basis == "paused"
    assert handles[0].eta().estimated_start is None
    resume_queue("line")
    assert handles[0].eta().basis == "throughput"


@override_settings(RATEQUEUE=GATED)
def test_the_rate_limit_then_the_reservation_give_the_exact_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token every 10 s: before the loop reserves, the estimate counts the tokens the
    jobs ahead take; the reservation then confirms it, and the job starts at that time."""
    clock = freeze(monkeypatch)
    t0 = clock.now()
    handles = []
    for i in range(3):
        handles.append(enqueue(jobs.add, args=[i, i], queue="gated"))
        clock.advance(0.001)
    clock.moment = t0
    before = [h.eta() for h in handles]
    assert [e.basis for e in before] == ["throughput", "rate_limit", "rate_limit"]
    assert [e.estimated_start for e in before] == [
        t0 + timedelta(seconds=10 * i) for i in range(3)
    ]
    step(clock)
    after = [h.eta() for h in handles[1:]]
    assert [e.basis for e in after] == ["reservation", "reservation"]
    for estimate, promised in zip(after, before[1:], strict=True):
        assert estimate.estimated_start is not None and promised.estimated_start is not None
        assert abs(estimate.estimated_start - promised.estimated_start) < timedelta(milliseconds=1)
    reserved = Job.objects.get(pk=handles[1].id)
    assert after[0].estimated_start == reserved.start_at
    step(clock, (reserved.start_at - clock.now()).total_seconds())
    assert handles[1].status() == Status.RUNNING


def test_running_and_finished_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = freeze(monkeypatch)
    handle = enqueue(jobs.add, args=[1, 1])
    step(clock)
    beat(force=True)  # a live worker that knows the job: it is as good as running
    assert handle.eta() == Eta(0, None, None, "running")
    Job.objects.filter(pk=handle.id).update(status=Status.COMPLETE)
    assert handle.eta() == Eta(0, None, None, "finished")
    assert handle.eta().as_json() == {
        "position": 0,
        "earliest_start": None,
        "estimated_start": None,
        "basis": "finished",
        "position_capped": False,
        "note": "",
    }


def test_eta_of_another_owners_job_is_refused() -> None:
    handle = enqueue(jobs.add, args=[1, 1], owner="alice")
    with pytest.raises(JobDoesNotExist):
        Handle(handle.id, owner="bob").eta()


def test_aeta_is_the_async_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    freeze(monkeypatch)
    handle = enqueue(jobs.add, args=[1, 1])
    # Its reads run back in this thread (thread-sensitive), on this test's connection.
    assert async_to_sync(handle.aeta)() == handle.eta()


@override_settings(RATEQUEUE=TWO_SLOTS)
def test_a_keys_own_limit_gives_its_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key whose limit the business raised to 4 starts four at once; one set to 0 waits
    like a paused queue."""
    clock = freeze(monkeypatch)
    set_key_limit("line", "big", max_concurrency=4)
    big = []
    for i in range(5):
        clock.advance(0.001)
        big.append(enqueue(jobs.add, args=[i, i], queue="line", concurrency_key="big"))
    small = []
    for i in range(3):
        clock.advance(0.001)
        small.append(enqueue(jobs.add, args=[i, i], queue="line", concurrency_key="small"))
    assert [h.eta().estimated_start for h in big[:4]] == [clock.now()] * 4
    assert big[4].eta().basis == "unknown"  # behind four, no run time yet
    assert [h.eta().estimated_start for h in small[:2]] == [clock.now()] * 2
    assert small[2].eta().basis == "unknown"
    set_key_limit("line", "big", max_concurrency=0)
    assert big[0].eta() == Eta(0, None, None, "paused")


KEYED = {
    "RATE_LIMITS": {"tenant_tokens": {"per_key": "tests.ratelimit.plans.plan_limit"}},
    "QUEUES": {"llm": {"max_concurrency": 10, "rate_limit": "tenant_tokens"}},
}


@override_settings(RATEQUEUE=KEYED)
def test_a_keyed_rate_limit_is_the_keys_own_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan tiers: the small tenant gets a token a minute, the big one 20 at once."""
    clock = freeze(monkeypatch)
    plans.PLANS.update({"small": "reserving", "big": "pro"})
    try:
        handles = {}
        for key in ("small", "big"):
            for i in range(2):
                clock.advance(0.001)
                handles[(key, i)] = enqueue(
                    jobs.add, args=[i, i], queue="llm", concurrency_key=key
                )
        now = clock.now()
        second = handles[("small", 1)].eta()
        assert (second.basis, second.estimated_start) == ("rate_limit", now + timedelta(minutes=1))
        assert handles[("big", 1)].eta().estimated_start == now
    finally:
        plans.PLANS.clear()

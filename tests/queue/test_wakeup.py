"""The wake-up protocol, step by step in this process, with a clock the test moves.

Each agent here is what runs in one worker process's thread (:mod:`.agent`): a test calls
its turns by hand, in the order a race would interleave them. Signals and claims are the
real statements on the test database."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_ratequeue import enqueue, enqueue_many
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.agent import Agent
from django_ratequeue.engine.dispatch import Dispatch
from django_ratequeue.engine.heartbeat import beat, mark_serving
from django_ratequeue.engine.models import LoopStatus
from django_ratequeue.engine.runner import Runner
from django_ratequeue.engine.wakeup import LOOP, WORK, Waiter, signal
from django_ratequeue.models import Attempt, LoopState
from django_ratequeue.monitor.overview import queue_overview
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


def generation() -> int:
    return LoopState.objects.ensure().generation


# -- leading and following -----------------------------------------------------------------


@pytest.mark.django_db
def test_the_first_agent_leads_and_the_others_follow(frozen: Clock) -> None:
    first, second = Agent(), Agent()
    before = generation()
    first.turn()
    assert first.loop is not None and generation() == before + 1
    assert second.turn() == ratequeue_settings().WATCHDOG_INTERVAL
    assert second.loop is None and generation() == before + 1


@pytest.mark.django_db
def test_a_leader_that_stops_renewing_is_replaced_and_then_follows(frozen: Clock) -> None:
    leader, follower = Agent(), Agent()
    leader.turn()
    interval = ratequeue_settings().WATCHDOG_INTERVAL
    frozen.advance(1.5 * interval)  # late, but within the grace of two intervals
    follower.turn()
    assert follower.loop is None
    frozen.advance(interval)  # two intervals and a half without a renewal
    follower.turn()
    assert follower.loop is not None
    # The old leader wakes up: its step finds the generation taken, and it follows.
    leader.turn()
    assert leader.loop is None
    assert follower.loop.generation == generation()


@pytest.mark.django_db
def test_a_resting_leader_waits_until_its_next_wake_or_its_lease_renewal(
    frozen: Clock,
) -> None:
    agent = Agent()
    interval = ratequeue_settings().WATCHDOG_INTERVAL
    assert agent.turn() == interval  # idle: nothing sooner than the lease's renewal
    assert LoopState.objects.ensure().state == LoopStatus.IDLE
    enqueue(jobs.add, args=[1, 1], start_at=frozen.now() + timedelta(seconds=interval / 5))
    pause = agent.turn()
    assert 0 < pause <= interval / 5 + ratequeue_settings().SEGMENT
    assert LoopState.objects.ensure().state == LoopStatus.SCHEDULED


@pytest.mark.django_db
def test_a_leader_with_more_work_than_one_step_takes_turns_without_waiting(
    frozen: Clock, settings: Any
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 2}
    enqueue_many(jobs.add, [[1, 1]] * 3)
    agent = Agent()
    agent.turn()  # starts two; the third waits for a slot: the loop is saturated
    assert Attempt.objects.count() == 2
    assert LoopState.objects.ensure().state == LoopStatus.SATURATED
    Runner("a-worker").drain()
    assert agent.turn() >= 0
    assert Attempt.objects.count() == 3


# -- signals -------------------------------------------------------------------------------


@pytest.mark.postgres_only
def test_a_signal_arrives_at_commit_and_never_for_a_rollback(transactional_db: None) -> None:
    waiter = Waiter((LOOP,))
    try:
        assert waiter.wait(0)  # the first wait starts listening: look for work at once
        with transaction.atomic():
            signal(LOOP)
            assert not waiter.wait(0.2)  # not before the commit
        assert waiter.wait(5)
        with pytest.raises(RuntimeError), transaction.atomic():
            signal(LOOP)
            raise RuntimeError
        assert not waiter.wait(0.2)
        signal(WORK)  # another channel
        assert not waiter.wait(0.2)
    finally:
        waiter.close()


@pytest.mark.postgres_only
def test_signals_that_arrived_while_nobody_waited_share_their_wakes(
    transactional_db: None,
) -> None:
    """A wake takes every signal received by then: twenty steps' worth of signals do not
    make twenty steps (how many arrive together is up to the server's timing)."""
    waiter = Waiter((LOOP,))
    try:
        waiter.wait(0)
        for _ in range(20):
            signal(LOOP)
        wakes = 0
        while waiter.wait(0.5):
            wakes += 1
        assert 1 <= wakes < 20
    finally:
        waiter.close()


@pytest.mark.postgres_only
def test_an_enqueue_signals_the_loop(transactional_db: None) -> None:
    waiter = Waiter((LOOP,))
    try:
        waiter.wait(0)
        enqueue(jobs.add, args=[1, 1])  # the INSERT's own RETURNING raises it
        assert waiter.wait(5)
        enqueue_many(jobs.add, [[1, 1]] * 3)
        assert waiter.wait(5)
    finally:
        waiter.close()


def test_on_sqlite_a_waiter_wakes_on_another_connections_commit(transactional_db: None) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's waiters poll; PostgreSQL's listen (the tests above)")
    waiter = Waiter((LOOP,))
    assert not waiter.wait(0.05)  # nothing committed elsewhere meanwhile

    def enqueue_elsewhere() -> None:
        try:
            enqueue(jobs.add, args=[1, 1])
        finally:
            connection.close()

    producer = threading.Thread(target=enqueue_elsewhere)
    producer.start()
    producer.join(timeout=30)
    assert waiter.wait(5)


# -- claims --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_claim_takes_at_most_its_limit_by_priority(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 10}
    low = enqueue_many(jobs.add, [[1, 1]] * 3, priority=0)
    high = enqueue(jobs.add, args=[2, 2], priority=5)
    leading_loop().step()
    (first,) = Runner("one").claim(1)
    assert first.job_id == high.id
    two = Runner("two").claim(2)
    assert [a.job_id for a in two] == [low[0].id, low[1].id]
    assert Attempt.objects.filter(worker="").count() == 1


@pytest.mark.postgres_only
def test_runners_claiming_at_once_never_take_the_same_attempt(
    transactional_db: None, settings: Any
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 40}
    enqueue_many(jobs.add, [[1, 1]] * 40)
    leading_loop().step()
    start = threading.Barrier(8)
    claimed: dict[str, list[int]] = {}

    def claim(name: str) -> None:
        try:
            start.wait()
            runner, mine = Runner(name), []
            while taken := runner.claim(3):
                mine.extend(attempt.pk for attempt in taken)
            claimed[name] = mine
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=[f"r{n}"]) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [pk for mine in claimed.values() for pk in mine]
    assert len(every) == len(set(every)) == 40
    for name, mine in claimed.items():
        assert set(Attempt.objects.filter(worker=name).values_list("pk", flat=True)) == set(mine)


@pytest.mark.django_db
def test_the_overview_says_which_worker_leads_and_which_serve(frozen: Clock) -> None:
    agent = Agent()
    agent.turn()  # this process's heartbeat, and the lease
    mark_serving(beat(), ratequeue_settings().SLOTS)
    (worker,) = queue_overview().workers
    assert worker.leads and worker.serving
    frozen.advance(2 * ratequeue_settings().LOOP_LEASE)  # the loop stopped, the process not
    beat(force=True)
    overview = queue_overview()
    assert overview.loop.lease_lapsed and not overview.workers[0].leads


@pytest.mark.postgres_only
def test_a_job_committed_while_the_leader_steps_wakes_it_again(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the old kicks needed a lingering pass for: a producer commits after the
    step read the waiting jobs, before the leader waits. Its signal arrives after the
    step's commit, so the leader's next wait returns at once and the next step starts it."""
    agent, waiter = Agent(), Waiter((LOOP,))
    agent.turn()  # leads; nothing to do
    waiter.wait(0)  # listening from here on
    real_start_ready = Dispatch.start_ready
    late: list[Any] = []

    def start_ready_then_a_producer_commits(self: Dispatch, *args: Any) -> Any:
        started = real_start_ready(self, *args)
        if not late:
            producer = threading.Thread(
                target=lambda: (late.append(enqueue(jobs.add, args=[1, 1])), connection.close())
            )
            producer.start()
            producer.join(timeout=30)
        return started

    monkeypatch.setattr(Dispatch, "start_ready", start_ready_then_a_producer_commits)
    try:
        agent.turn()  # its step misses the job, committed meanwhile
        assert not Attempt.objects.filter(job_id=late[0].id).exists()
        assert waiter.wait(5)  # ...but the producer's signal is there
        agent.turn()
        assert Attempt.objects.filter(job_id=late[0].id).exists()
    finally:
        waiter.close()

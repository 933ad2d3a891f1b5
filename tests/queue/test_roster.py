"""Whom a step's new attempts wake: the runner that will take each, not every runner.

Workers here are heartbeat rows made by the production beat, each under a new worker id
(as a new process would get); steps and claims are the real statements. On PostgreSQL the
signals are real too, heard by real waiters."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_ratequeue import enqueue, enqueue_many
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import heartbeat
from django_ratequeue.engine.heartbeat import beat, mark_serving
from django_ratequeue.engine.models import Attempt, Job, WorkerHeartbeat
from django_ratequeue.engine.protocol import Claimant, claim_local
from django_ratequeue.engine.registry import known_paths
from django_ratequeue.engine.roster import CLAIM_GRACE, Roster, runner_channel
from django_ratequeue.engine.wakeup import WORK, Waiter
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


def serving_worker(monkeypatch: pytest.MonkeyPatch, slots: int | None = None) -> str:
    """Start a new worker's heartbeat, its runner serving with ``slots`` slots (SLOTS by
    default, as a runner's pool has); return its worker id."""
    monkeypatch.setattr(heartbeat, "_identity", None)  # a new process: a new id
    identity = beat(force=True)
    mark_serving(identity, ratequeue_settings().SLOTS if slots is None else slots)
    return identity


def dispatched() -> list[tuple[Job, Attempt]]:
    """Return the attempts dispatched and not claimed, with their jobs."""
    unclaimed = Attempt.objects.filter(active=True, worker="").select_related("job")
    return [(attempt.job, attempt) for attempt in unclaimed.order_by("pk")]


def active() -> list[Attempt]:
    return list(Attempt.objects.filter(active=True, ended_at=None))


def claim(worker: str, limit: int) -> list[Attempt]:
    return claim_local(Claimant(worker), limit, known_paths())


def step_and_wake(clock: Clock, roster: Roster | None = None) -> set[str]:
    """Step the loop, then return whom ``roster`` (a new one by default) wakes for every
    attempt waiting for a runner, as if the step had just started them all."""
    leading_loop().step()
    roster = roster or Roster(ratequeue_settings())
    return roster.channels(dispatched(), active(), clock.now())


def one_called(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> tuple[str, Roster]:
    """Start a job whose attempt calls the one serving runner; return it and the roster."""
    runner, roster = serving_worker(monkeypatch), Roster(ratequeue_settings())
    enqueue(jobs.add, args=[1, 1])
    assert step_and_wake(clock, roster) == {runner_channel(runner)}
    return runner, roster


@pytest.mark.django_db
def test_an_attempt_wakes_the_runner_with_a_free_slot_alone(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "SLOTS": 2, "MAX_CONCURRENCY": 10}
    full, free = serving_worker(monkeypatch), serving_worker(monkeypatch)
    enqueue_many(jobs.add, [[1, 1]] * 2)
    leading_loop().step()
    assert len(claim(full, 2)) == 2  # every slot of ``full`` is taken
    enqueue(jobs.add, args=[2, 2])
    channels = step_and_wake(frozen)
    assert channels == {runner_channel(free)}


@pytest.mark.django_db
def test_attempts_started_together_are_spread_over_the_free_runners(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "SLOTS": 1, "MAX_CONCURRENCY": 10}
    runners = {serving_worker(monkeypatch) for _ in range(3)}
    enqueue_many(jobs.add, [[1, 1]] * 3)
    channels = step_and_wake(frozen)
    assert channels == {runner_channel(runner) for runner in runners}


@pytest.mark.django_db
def test_the_leaders_own_runner_is_woken_only_when_the_others_are_full(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    """The leader's steps hold its process's GIL: a job runs sooner elsewhere."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "SLOTS": 2, "MAX_CONCURRENCY": 10}
    other, own = serving_worker(monkeypatch), serving_worker(monkeypatch)
    assert heartbeat.worker_id() == own  # this process leads the loop below
    enqueue(jobs.add, args=[1, 1])
    assert step_and_wake(frozen) == {runner_channel(other)}
    enqueue_many(jobs.add, [[1, 1]] * 2)
    channels = step_and_wake(frozen)
    assert channels == {runner_channel(other), runner_channel(own)}


@pytest.mark.django_db
def test_a_runner_is_called_for_the_slots_its_heartbeat_says_not_the_leaders(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    """A host may run workers of fewer slots than the leader's SLOTS."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "SLOTS": 4, "MAX_CONCURRENCY": 10}
    small = serving_worker(monkeypatch, slots=1)
    enqueue_many(jobs.add, [[1, 1]] * 2)
    channels = step_and_wake(frozen)
    assert channels == {runner_channel(small), WORK}


@pytest.mark.django_db
def test_an_attempt_past_the_free_slots_wakes_every_runner(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "SLOTS": 1, "MAX_CONCURRENCY": 10}
    runner = serving_worker(monkeypatch)
    enqueue_many(jobs.add, [[1, 1]] * 2)
    channels = step_and_wake(frozen)
    assert channels == {runner_channel(runner), WORK}


@pytest.mark.django_db
def test_an_attempt_no_serving_runner_knows_wakes_every_runner(
    monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    """As a job of a newer deploy: its runner is among those not known yet."""
    runner = serving_worker(monkeypatch)
    older = [path for path in known_paths() if path != "tests.queue.jobs.add"]
    WorkerHeartbeat.objects.filter(pk=runner).update(functions=older)
    enqueue(jobs.add, args=[1, 1])
    channels = step_and_wake(frozen)
    assert channels == {WORK}


@pytest.mark.django_db
def test_a_remote_attempt_wakes_every_listener(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    """The remote workers' claims wait on the web processes' bells, which hear WORK."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "QUEUES": {"far": {"remote": True}}}
    serving_worker(monkeypatch)
    enqueue(jobs.add, args=[1, 1], queue="far")
    channels = step_and_wake(frozen)
    assert channels == {WORK}


@pytest.mark.django_db
def test_an_attempt_left_unclaimed_wakes_every_runner_once(
    monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    _runner, roster = one_called(monkeypatch, frozen)
    assert roster.next_recall() == frozen.now() + CLAIM_GRACE
    assert roster.channels([], active(), frozen.now()) == set()  # within its grace
    frozen.advance(CLAIM_GRACE.total_seconds())
    assert roster.channels([], active(), frozen.now()) == {WORK}  # its runner never came
    assert roster.channels([], active(), frozen.now()) == set()  # once
    assert roster.next_recall() is None


@pytest.mark.django_db
def test_an_attempt_claimed_in_its_grace_wakes_nobody_more(
    monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    runner, roster = one_called(monkeypatch, frozen)
    assert len(claim(runner, 1)) == 1
    frozen.advance(CLAIM_GRACE.total_seconds())
    assert roster.channels([], active(), frozen.now()) == set()
    assert roster.next_recall() is None


@pytest.mark.django_db
def test_choosing_the_runners_costs_a_step_no_statement_per_job(
    settings: Any, monkeypatch: pytest.MonkeyPatch, frozen: Clock
) -> None:
    """The runner is chosen by the job's function, which the step reads with the job:
    a step that starts twenty jobs sends the statements of one that starts one."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "SLOTS": 40, "MAX_CONCURRENCY": 40}
    serving_worker(monkeypatch)
    sent = []
    for count in (1, 1, 20):  # the first writes what a first start does once (the turns)
        enqueue_many(jobs.add, [[1, 1]] * count)
        loop = leading_loop()
        with CaptureQueriesContext(connection) as queries:
            loop.step()
        sent.append(len(queries))
        Attempt.objects.update(active=False)
    assert sent[1] == sent[2]


@pytest.mark.postgres_only
def test_a_step_signals_the_runner_that_will_take_its_attempt(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path on real signals: the step's commit wakes the chosen runner's
    waiter alone; the resting loop comes back after the grace, and then wakes all."""
    first, second = serving_worker(monkeypatch), serving_worker(monkeypatch)
    waiters = {
        name: Waiter((channel,))
        for name, channel in (
            ("first", runner_channel(first)),
            ("second", runner_channel(second)),
            ("all", WORK),
        )
    }
    try:
        for waiter in waiters.values():
            assert waiter.wait(0)  # the first wait starts listening
        enqueue(jobs.add, args=[1, 1])
        loop = leading_loop()
        loop.step()
        woken = {name for name, waiter in waiters.items() if waiter.wait(0.3)}
        assert woken in ({"first"}, {"second"})
        assert loop.rested and loop.next_wake is not None
        (attempt,) = Attempt.objects.filter(active=True)
        assert loop.next_wake <= attempt.dispatched_at + CLAIM_GRACE + CLAIM_GRACE
    finally:
        for waiter in waiters.values():
            waiter.close()

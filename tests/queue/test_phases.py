"""Each phase of a loop step on its own, on a step renewed as the loop renews it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from django_ratequeue import cancel_all, enqueue
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.dispatch import Dispatch
from django_ratequeue.engine.lease import Lease
from django_ratequeue.engine.models import LoopStatus, Status, queue_db
from django_ratequeue.engine.phases import (
    Recovery,
    Rest,
    Start,
    Step,
    cancel,
    promote,
    read_active,
)
from django_ratequeue.models import Attempt, Job, LoopState, QueueMinute
from django_ratequeue.plugins.rollups.plugin import Rollups
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


def renewed_step(clock: Clock) -> Iterator[Step]:
    """Open a step's transaction, renew the lease as the loop does, and yield the step."""
    lease = Lease(LoopState.objects.ensure().generation)
    with transaction.atomic(using=queue_db()):
        renewal = lease.renew(clock.now())
        assert renewal is not None
        yield Step(clock.now(), renewal)


def one_step(clock: Clock) -> Step:
    return next(renewed_step(clock))


def test_a_step_starts_with_what_its_renewal_read(frozen: Clock) -> None:
    later = frozen.now() + timedelta(minutes=5)
    enqueue(jobs.add, args=[1, 1], start_at=later)
    for step in renewed_step(frozen):
        assert step.deferred == later
        assert not step.renewal.cancels_waiting
        assert not step.did_work and not step.more_work


def test_promote_waits_for_the_earliest_deferred_start(frozen: Clock) -> None:
    handle = enqueue(jobs.add, args=[1, 1], start_at=frozen.now() + timedelta(seconds=30))
    for step in renewed_step(frozen):
        promote(step)
        assert not step.did_work
    assert Job.objects.get(pk=handle.id).status == Status.SCHEDULED
    frozen.advance(30)
    for step in renewed_step(frozen):
        promote(step)
        assert step.did_work and step.deferred is None
    assert Job.objects.get(pk=handle.id).status == Status.WAITING


def test_cancel_applies_the_requests_its_renewal_saw(frozen: Clock) -> None:
    handle = enqueue(jobs.add, args=[1, 1], queue="elsewhere")
    cancel_all("elsewhere")
    for step in renewed_step(frozen):
        assert step.renewal.cancels_waiting
        cancel(step)
        assert step.did_work
        assert [job.pk for job in step.moves.finished] == [handle.id]
    assert Job.objects.get(pk=handle.id).status == Status.CANCELED


def test_start_dispatches_and_records_the_starts(frozen: Clock) -> None:
    handle = enqueue(jobs.add, args=[1, 1])
    dispatch = Dispatch(ratequeue_settings())
    for step in renewed_step(frozen):
        read_active(step)
        Start(dispatch)(step)
        assert step.did_work and [a.job_id for a in step.running] == [handle.id]
        assert [job.pk for job, _ready in step.moves.started] == [handle.id]
    assert Attempt.objects.filter(job_id=handle.id, active=True).exists()


def test_count_writes_the_moves_of_the_step(frozen: Clock) -> None:
    enqueue(jobs.add, args=[1, 1])
    dispatch = Dispatch(ratequeue_settings())
    rollups = Rollups()
    for step in renewed_step(frozen):
        rollups.arrivals(step)
        read_active(step)
        Start(dispatch)(step)
        rollups.count(step)
    assert QueueMinute.objects.get(queue="default").started == 1


def test_rest_is_idle_without_work_and_scheduled_before_a_deferred_start(
    frozen: Clock,
) -> None:
    rest = Rest(Dispatch(ratequeue_settings()), ratequeue_settings())
    for step in renewed_step(frozen):
        rest(step)
        assert step.rested and step.wake is None
    assert LoopState.objects.get().state == LoopStatus.IDLE
    enqueue(jobs.add, args=[1, 1], start_at=frozen.now() + timedelta(seconds=30))
    for step in renewed_step(frozen):
        rest(step)
        assert step.rested and step.wake is not None
    assert LoopState.objects.get().state == LoopStatus.SCHEDULED


def test_recovery_looks_at_most_once_per_watchdog_interval(
    frozen: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[Any] = []
    monkeypatch.setattr(
        "django_ratequeue.engine.phases.recover", lambda *args: looked.append(args) or False
    )
    recovery = Recovery(ratequeue_settings())
    for _ in range(3):
        recovery(one_step(frozen))
    assert len(looked) == 1


def test_the_loop_runs_its_phases_in_order() -> None:
    loop = leading_loop()
    names = [getattr(phase, "__name__", type(phase).__name__) for phase in loop.phases]
    assert names == [
        "Recovery",
        "cancel",
        "read_active",
        "finish_ended",
        "Resume",
        "promote",
        "EnqueueSchedules",
        "EndBatches",
        "Start",
        "EndBatches",
        "Ring",
        "arrivals",
        "Rest",
        "count",
        "announce_moves",
    ]

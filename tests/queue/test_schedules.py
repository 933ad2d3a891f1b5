"""Recurring schedules, step by step with a frozen clock: each run enqueued once, never lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_for_hypothesis
from hypothesis import strategies as st

from django_ratequeue.engine.models import LoopStatus, Status, queue_db
from django_ratequeue.engine.wakeup import segment_ceiling
from django_ratequeue.models import Attempt, Job, LoopState, Schedule
from django_ratequeue.plugins.schedules.catchup import ALL_LIMIT
from django_ratequeue.plugins.schedules.declarations import manual_run_id, run_id
from django_ratequeue.plugins.schedules.recurrence import Recurrence
from django_ratequeue.plugins.schedules.runs import (
    EnqueueSchedules,
    change_recurrence,
    pause_schedule,
    resume_schedule,
    run_due,
    run_now,
)
from django_ratequeue.plugins.schedules.sync import sync_schedules
from tests.cluster import wait_for
from tests.queue.steps import Clock, freeze, leading_loop
from tests.queue.test_recurrence import model_policy, runs_between
from tests.threads import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.queue.jobs.add"


def declared(**schedules: dict[str, Any]) -> Any:
    """Declare ``schedules`` in the settings (over the tests' own)."""
    return override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": schedules})


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = freeze(monkeypatch)
    clock.moment = datetime(2026, 11, 27, 12, 0, 10, tzinfo=UTC)
    return clock


@pytest.fixture
def every_minute() -> Iterator[None]:
    with declared(tick={"function": ADD, "every": 60, "args": [1, 2], "misfire": "skip"}):
        yield


def run_ids() -> list[str]:
    return sorted(Job.objects.values_list("id", flat=True))


def test_a_due_run_is_enqueued_once_and_starts_in_the_same_step(
    frozen: Clock, every_minute: None
) -> None:
    loop = leading_loop()
    loop.step()
    row = Schedule.objects.get(pk="tick")
    assert row.next_run_at == datetime(2026, 11, 27, 12, 1, tzinfo=UTC)
    assert Job.objects.count() == 0
    frozen.advance(50)  # 12:01:00
    loop.step()
    due = run_id("tick", datetime(2026, 11, 27, 12, 1, tzinfo=UTC))
    assert run_ids() == [due]
    job = Job.objects.get(pk=due)
    assert job.status == Status.RUNNING and job.args == [1, 2]
    loop.step()
    assert run_ids() == [due]
    row.refresh_from_db()
    assert (row.runs, row.skipped, row.last_job_id) == (1, 0, due)
    assert row.next_run_at == datetime(2026, 11, 27, 12, 2, tzinfo=UTC)


def test_the_resting_loop_wakes_for_the_next_run(frozen: Clock, every_minute: None) -> None:
    loop = leading_loop()
    loop.step()
    assert loop.rested
    assert loop.next_wake == segment_ceiling(datetime(2026, 11, 27, 12, 1, tzinfo=UTC))
    assert LoopState.objects.get().state == LoopStatus.SCHEDULED


def test_two_leaders_that_read_the_same_due_run_enqueue_it_once(
    frozen: Clock, every_minute: None
) -> None:
    leading_loop().step()
    frozen.advance(50)
    first, second = Schedule.objects.get(), Schedule.objects.get()
    assert run_due(first, frozen.now()) == (1, True)
    assert run_due(second, frozen.now()) == (0, True)  # its conditional UPDATE lost
    assert Job.objects.count() == 1
    assert Schedule.objects.get().runs == 1


def test_two_leaders_racing_in_two_threads_enqueue_once(frozen: Clock, every_minute: None) -> None:
    """Both read the due run, then both enqueue it at once, each in its own transaction."""
    leading_loop().step()
    frozen.advance(50)
    both_read = threading.Barrier(2, timeout=30)
    results: list[tuple[int, bool]] = []

    def contend() -> None:
        row = Schedule.objects.get()
        both_read.wait()
        with transaction.atomic(using=queue_db()):
            results.append(run_due(row, frozen.now()))

    run_in_threads(contend, 2)
    assert sorted(results) == [(0, True), (1, True)]
    assert Job.objects.count() == 1
    assert Schedule.objects.get().runs == 1


def test_a_leader_killed_mid_step_leaves_nothing_and_the_next_enqueues_once(
    frozen: Clock, every_minute: None
) -> None:
    leading_loop().step()
    frozen.advance(50)
    with pytest.raises(RuntimeError), transaction.atomic(using=queue_db()):
        run_due(Schedule.objects.get(), frozen.now())
        assert Job.objects.count() == 1
        raise RuntimeError("killed before the step commits")
    assert Job.objects.count() == 0
    assert Schedule.objects.get().next_run_at == frozen.now()
    leading_loop().step()
    assert Job.objects.count() == 1


def test_a_restored_schedule_does_not_enqueue_its_run_again(
    frozen: Clock, every_minute: None
) -> None:
    loop = leading_loop()
    loop.step()
    frozen.advance(50)
    loop.step()
    # The schedules' table restored from before the run: its job is there already.
    Schedule.objects.update(next_run_at=frozen.now(), runs=0)
    loop.step()
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("misfire", "enqueued", "skipped"), [("skip", 1, 10), ("once", 2, 9), ("all", 11, 0)]
)
def test_misfire_policies_after_downtime(
    frozen: Clock, misfire: str, enqueued: int, skipped: int
) -> None:
    with declared(tick={"function": ADD, "every": 60, "args": [1, 2], "misfire": misfire}):
        leading_loop().step()
        # Down from 12:00:10 to 12:11:20: 12:01 to 12:10 missed, 12:11 on time.
        frozen.advance(11 * 60 + 10)
        leading_loop().step()
    row = Schedule.objects.get()
    assert (row.runs, row.skipped) == (enqueued, skipped)
    assert Job.objects.count() == enqueued
    assert row.next_run_at == datetime(2026, 11, 27, 12, 12, tzinfo=UTC)
    if skipped:
        assert row.last_skipped_at is not None
    if misfire == "once":
        assert run_ids() == [
            run_id("tick", datetime(2026, 11, 27, 12, minute, tzinfo=UTC)) for minute in (10, 11)
        ]


def test_all_enqueues_the_latest_runs_up_to_its_limit(frozen: Clock) -> None:
    with declared(tick={"function": ADD, "every": 60, "args": [1, 2], "misfire": "all"}):
        leading_loop().step()
        frozen.advance(3 * 3600)  # 180 runs missed
        loop = leading_loop()
        loop.run(30)
    row = Schedule.objects.get()
    assert (row.runs, row.skipped) == (ALL_LIMIT + 1, 179 - ALL_LIMIT)  # 15:00 on time
    assert run_id("tick", datetime(2026, 11, 27, 15, 0, tzinfo=UTC)) in run_ids()


def test_a_run_found_late_within_the_grace_is_on_time(frozen: Clock, every_minute: None) -> None:
    leading_loop().step()
    frozen.advance(50 + 30)  # 30 s after 12:01
    leading_loop().step()
    assert Schedule.objects.get().runs == 1


def test_pause_and_resume(frozen: Clock, every_minute: None) -> None:
    loop = leading_loop()
    loop.step()
    assert pause_schedule("tick")
    frozen.advance(300)
    loop.step()
    assert Job.objects.count() == 0
    assert resume_schedule("tick", frozen.now())
    row = Schedule.objects.get()
    assert not row.paused and row.skipped == 0
    assert row.next_run_at == datetime(2026, 11, 27, 12, 6, tzinfo=UTC)
    frozen.advance(60)
    loop.step()
    assert Job.objects.count() == 1


def test_run_now_twice_in_a_minute_enqueues_once(frozen: Clock, every_minute: None) -> None:
    leading_loop().step()
    first = run_now("tick", frozen.now())
    frozen.advance(20)
    second = run_now("tick", frozen.now())
    assert first.id == second.id == manual_run_id("tick", frozen.now())
    frozen.advance(60)
    assert run_now("tick", frozen.now()).id != first.id
    assert Job.objects.count() == 2
    assert Schedule.objects.get().next_run_at == datetime(2026, 11, 27, 12, 1, tzinfo=UTC)


def test_an_admin_edit_stands_until_the_declaration_changes(frozen: Clock) -> None:
    declaration = {"function": ADD, "cron": "0 3 * * *", "args": [1, 2]}
    with declared(nightly=declaration):
        sync_schedules(frozen.now())
        change_recurrence("nightly", Recurrence.parse("0 4 * * *", None, "UTC"), frozen.now())
        sync_schedules(frozen.now())  # the loop's next leader: the edit stands
        row = Schedule.objects.get()
        assert row.cron == "0 4 * * *" and row.edited_at is not None
        assert row.next_run_at == datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
    with declared(nightly={**declaration, "cron": "0 5 * * *"}):
        sync_schedules(frozen.now())
    row = Schedule.objects.get()
    assert row.cron == "0 5 * * *" and row.edited_at is None
    assert row.next_run_at == datetime(2026, 11, 28, 5, 0, tzinfo=UTC)


def test_a_schedule_no_longer_declared_is_disabled_then_resumes(frozen: Clock) -> None:
    declaration = {"function": ADD, "every": 60, "args": [1, 2]}
    with declared(tick=declaration):
        sync_schedules(frozen.now())
    with declared():
        sync_schedules(frozen.now())
    row = Schedule.objects.get()
    assert row.removed_at is not None and row.next_run_at is None
    with declared(tick=declaration):
        sync_schedules(frozen.now())
    row = Schedule.objects.get()
    assert row.removed_at is None and row.next_run_at is not None


def test_an_invalid_schedule_is_left_out_and_the_valid_ones_sync(frozen: Clock) -> None:
    """The settings hold SCHEDULES as given: the plug-in's parse keeps the valid ones (the
    system check reports the other, E241)."""
    with declared(
        tick={"function": ADD, "every": 60, "args": [1, 2]},
        nightly={"function": ADD, "cron": "0 25 * * *", "args": [1, 2]},
    ):
        assert sync_schedules(frozen.now()) == 1
    assert list(Schedule.objects.values_list("name", flat=True)) == ["tick"]


def test_a_run_that_cannot_be_enqueued_is_counted_with_its_error(frozen: Clock) -> None:
    with declared(tick={"function": ADD, "every": 60, "args": [1, 2]}):
        leading_loop().step()
    # The function changed under the stored arguments (as a deploy may do).
    Schedule.objects.update(args=[1, 2, 3])
    frozen.advance(50)
    with declared(tick={"function": ADD, "every": 60, "args": [1, 2]}):
        loop = leading_loop()
        for phase in loop.phases:
            if isinstance(phase, EnqueueSchedules):
                phase.synced = True  # as a leader that synced before the change
        loop.step()
    row = Schedule.objects.get()
    assert (row.runs, row.skipped) == (0, 1)
    assert "do not fit" in row.last_error
    assert row.next_run_at == datetime(2026, 11, 27, 12, 2, tzinfo=UTC)


def test_a_daily_0230_paris_run_across_both_changes_of_the_clocks(frozen: Clock) -> None:
    """It runs on 29 March at 03:30 CEST, and once on 25 October, at the first 02:30."""
    declaration = {
        "function": ADD,
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
        "args": [1, 2],
    }
    with declared(nightly=declaration):
        loop = leading_loop()
        for start in (
            datetime(2026, 3, 28, 12, tzinfo=UTC),
            datetime(2026, 10, 24, 12, tzinfo=UTC),
        ):
            frozen.moment = start
            loop.step()
            for _run in range(2):  # the loop wakes at the next run (see the test above)
                next_run = Schedule.objects.get().next_run_at
                assert next_run is not None
                frozen.moment = next_run
                loop.step()
    times = ["20260329T013000Z", "20260330T003000Z", "20261025T003000Z", "20261026T013000Z"]
    assert run_ids() == [f"nightly@{t}" for t in times]
    row = Schedule.objects.get()
    assert row.skipped > 200  # the days between, when no loop ran (misfire "skip")


def test_an_interval_schedules_runs_execute_on_a_real_cluster(cluster: Any) -> None:
    tick = {"function": ADD, "every": 1, "args": [2, 3], "misfire": "skip"}
    cluster(SCHEDULES={"tick": tick})

    def completed() -> list[Job]:
        return list(Job.objects.filter(id__startswith="tick@", status=Status.COMPLETE))

    done = wait_for(lambda: len(completed()) >= 3 and completed(), message="3 runs of tick")
    assert all(job.result == 5 for job in done)
    row = Schedule.objects.get()
    assert row.runs >= 3 and row.source == "settings"
    times = sorted(job.id for job in Job.objects.filter(id__startswith="tick@"))
    assert len(times) == len(set(times))


@settings_for_hypothesis(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    recurrence=st.sampled_from(
        [
            {"every": 60},
            {"every": 3600},
            {"cron": "*/15 * * * *", "timezone": "Europe/Paris"},
            {"cron": "30 2 * * *", "timezone": "Europe/Paris"},
            {"cron": "0 9 * * 1-5", "timezone": "America/New_York"},
        ]
    ),
    day=st.sampled_from([datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 10, 24, tzinfo=UTC)]),
    gaps=st.lists(st.integers(1, 30 * 3600), min_size=1, max_size=5),
    misfire=st.sampled_from(["skip", "once", "all"]),
)
def test_the_loop_enqueues_the_models_runs_after_any_downtimes(
    frozen: Clock, recurrence: dict[str, Any], day: datetime, gaps: list[int], misfire: str
) -> None:
    """The loop, stepped at moments apart by ``gaps``, enqueues what the model says."""
    Attempt.objects.all().delete()
    Job.objects.all().delete()
    Schedule.objects.all().delete()
    declaration = {"function": ADD, "args": [1, 2], "misfire": misfire, **recurrence}
    parsed = Recurrence.parse(
        recurrence.get("cron"), recurrence.get("every"), recurrence.get("timezone")
    )
    frozen.moment = day
    expected, skipped, last = [], 0, day
    with declared(tick=declaration):
        loop = leading_loop()
        loop.step()
        for gap in gaps:
            frozen.advance(gap)
            for _step in range(5):  # until the schedule is past now (one step, here)
                loop.step()
                if Schedule.objects.get().next_run_at > frozen.now():
                    break
            due = runs_between(parsed, last, frozen.now())
            runs, skips = model_policy(due, frozen.now(), misfire)
            expected += runs
            skipped += skips
            last = frozen.now()
    assert run_ids() == sorted(run_id("tick", at) for at in expected)
    assert Schedule.objects.get().skipped == skipped

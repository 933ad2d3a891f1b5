"""Enqueue the due runs of the recurring schedules: the loop's phase, and "run now".

Each run is an ordinary job, created as an enqueue creates one (:func:`.creation.create_jobs`
with the schedule's options over its function's), with the id
:func:`.declarations.run_id` derives from the schedule and its time, in the same
transaction as the conditional UPDATE that moves the schedule past it: a run is enqueued
once, whoever tries. docs/schedules.md ("Exactly once") tells why that holds.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from django_ratequeue.engine.bounds import clip
from django_ratequeue.engine.creation import Created, create_jobs, job_target
from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.heads import aware
from django_ratequeue.engine.models import queue_db
from django_ratequeue.engine.phases import Step
from django_ratequeue.engine.wakeup import LOOP, signal
from django_ratequeue.exceptions import RateQueueError
from django_ratequeue.plugins.schedules.catchup import CatchUp, catch_up
from django_ratequeue.plugins.schedules.declarations import manual_run_id, run_id
from django_ratequeue.plugins.schedules.models import Schedule
from django_ratequeue.plugins.schedules.recurrence import Recurrence
from django_ratequeue.plugins.schedules.sync import sync_schedules

logger = logging.getLogger("django_ratequeue.queue")

# The most due schedules one step reads, and the most runs it enqueues.
SCHEDULES_PER_STEP = 1000
RUNS_PER_STEP = 1000
ERROR_MAX_LENGTH = 2000


def next_schedule_time() -> datetime | None:
    """Return the earliest next run of any schedule, None when none will run."""
    value = (
        Schedule.objects.filter(next_run_at__isnull=False)
        .order_by("next_run_at")
        .values_list("next_run_at", flat=True)
        .first()
    )
    return None if value is None else aware(value)


def enqueue_run(row: Schedule, job_id: str) -> str:
    """Enqueue one run of ``row`` with id ``job_id``; return an error message or "".

    An error (arguments that no longer fit the function, a full rate gate...) fails this
    run alone; it is counted as skipped."""
    try:
        create_run(row, job_id)
    except (RateQueueError, ValueError, TypeError) as error:
        logger.warning("Run %s of schedule %r was not enqueued: %s", job_id, row.name, error)
        return clip(f"{job_id}: {type(error).__name__}: {error}", ERROR_MAX_LENGTH)
    return ""


def run_due(row: Schedule, now: datetime) -> tuple[int, bool]:
    """Enqueue the due runs of ``row`` its misfire policy keeps, and move it past them.

    Return how many were enqueued, and whether it is done (False: more are due than one
    step decides)."""
    seen = row.next_run_at
    assert seen is not None
    try:
        recurrence = row.recurrence
    except ValueError as bad:  # a stored recurrence that no longer parses: stop it
        Schedule.objects.advance(row.name, seen, next_run_at=None, last_error=str(bad))
        return 0, True
    plan = catch_up(recurrence, seen, now, row.misfire)
    # First the move: a contender that read the same next run waits for this step's end
    # (the row is locked), then finds it moved and enqueues nothing.
    if not Schedule.objects.advance(row.name, seen, **outcome(row, plan, plan.runs, [])):
        return 0, True
    failed = [(at, error) for at in plan.runs if (error := enqueue_run(row, run_id(row.name, at)))]
    if failed:  # rare: count them as skipped, with the last error
        enqueued = [at for at in plan.runs if at not in dict(failed)]
        Schedule.objects.filter(pk=row.name).update(**outcome(row, plan, enqueued, failed))
    return len(plan.runs) - len(failed), plan.done


def outcome(
    row: Schedule, plan: CatchUp, enqueued: list[datetime], failed: list[tuple[datetime, str]]
) -> dict[str, Any]:
    """Return the changes of ``row`` after ``plan``, ``enqueued`` and ``failed`` runs."""
    changes: dict[str, Any] = {"next_run_at": plan.next_run_at}
    if plan.runs:
        changes["runs"] = row.runs + len(enqueued)
    if enqueued:
        last = enqueued[-1]
        changes.update(last_run_at=last, last_job_id=run_id(row.name, last))
    skipped = [plan.last_skipped] if plan.last_skipped else []
    skipped += [at for at, _error in failed]
    if skipped:
        changes["skipped"] = row.skipped + plan.skipped + len(failed)
        changes["last_skipped_at"] = max(skipped)
    if failed:
        changes["last_error"] = failed[-1][1]
    return changes


class EnqueueSchedules:
    """Enqueue the schedules' due runs, and ask to be woken for the next (a loop phase).

    At its first step, the loop's new leader syncs the declared schedules into the
    table."""

    def __init__(self) -> None:
        self.synced = False

    def __call__(self, step: Step) -> None:
        next_run = step.renewal.next_schedule
        if not self.synced:
            step.did_work |= bool(sync_schedules(step.now))
            next_run = next_schedule_time()
            self.synced = True
        if next_run is not None and next_run <= step.now:
            self.run_due(step)
            next_run = next_schedule_time()
        if next_run is not None:
            step.wakes.append(next_run)

    def run_due(self, step: Step) -> None:
        """Enqueue the runs due now, at most RUNS_PER_STEP of SCHEDULES_PER_STEP schedules."""
        due = list(Schedule.objects.due(step.now)[:SCHEDULES_PER_STEP])
        enqueued = 0
        for row in due:
            if enqueued >= RUNS_PER_STEP:
                step.more_work = True
                break
            runs, done = run_due(row, step.now)
            enqueued += runs
            step.more_work |= not done
        step.more_work |= len(due) == SCHEDULES_PER_STEP
        step.did_work |= bool(due)


def _wake_loop() -> None:
    """Wake the loop, whose next wake-up may come too late for the schedule changed now."""
    transaction.on_commit(lambda: signal(LOOP), using=queue_db())


def pause_schedule(name: str) -> bool:
    """Pause schedule ``name``: no run is due until it is resumed.

    Return whether it was running."""
    return bool(
        Schedule.objects.filter(pk=name, paused=False).update(paused=True, next_run_at=None)
    )


def resume_schedule(name: str, now: datetime) -> bool:
    """Resume schedule ``name`` from its first run after ``now``. Return whether it was paused.

    Runs that fell while it was paused are not runs: none is enqueued or counted."""
    row = Schedule.objects.filter(pk=name, paused=True, removed_at=None).first()
    if row is None:
        return False
    next_run = row.recurrence.next_after(now)
    resumed = Schedule.objects.filter(pk=name, paused=True).update(
        paused=False, next_run_at=next_run
    )
    _wake_loop()
    return bool(resumed)


def run_now(name: str, now: datetime) -> Handle[Any]:
    """Enqueue one run of schedule ``name`` now, outside its recurrence; return its handle.

    Its id derives from the minute it was asked in: asking twice in a minute (a double
    click) enqueues it once. Raise the enqueue's error when it fails."""
    created = create_run(Schedule.objects.get(pk=name), manual_run_id(name, now))
    return Handle(created.ids()[0], owner=created.template.owner)


def create_run(row: Schedule, job_id: str) -> Created:
    """Create the run of ``row`` with id ``job_id``, or find it created already.

    Raise what an enqueue of it would raise."""
    if not isinstance(row.args, list) or not isinstance(row.kwargs, dict):
        raise ValueError(f"Schedule {row.name!r}: args must be a list and kwargs a dict.")
    target, defaults = job_target(row.function)
    options: dict[str, Any] = {**row.options, "id": job_id, "on_duplicate_id": "ignore"}
    return create_jobs(target, defaults.merge(options), [(row.args, row.kwargs)])


def change_recurrence(name: str, recurrence: Recurrence, now: datetime) -> None:
    """Make ``recurrence`` the schedule's own (an admin's edit), from its first run after now.

    It stands until the declaration changes."""
    running = Schedule.objects.filter(pk=name, paused=False, removed_at=None).exists()
    Schedule.objects.filter(pk=name).update(
        cron=recurrence.cron,
        every=recurrence.every,
        timezone=recurrence.timezone,
        edited_at=now,
        next_run_at=recurrence.next_after(now) if running else None,
    )
    _wake_loop()

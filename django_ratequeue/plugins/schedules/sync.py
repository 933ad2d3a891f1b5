"""Bring the declared schedules into the table, and say what is wrong with them.

``RATEQUEUE["SCHEDULES"]`` reaches this plug-in as given: it is parsed here, and its
problems are the plug-in's system check's (:mod:`.checks`).

The loop syncs when it starts leading (so does ``manage.py ratequeue_schedules``). A
declaration that changed replaces the row's recurrence, an admin's edit included; one
that did not keeps the row as it is; a row no longer declared is disabled, not deleted.
docs/schedules.md ("Declarations and edits") tells the precedence.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from django_ratequeue.check_ids import (
    SCHEDULE_FUNCTION,
    SCHEDULE_INVALID,
    SCHEDULE_NAME_TAKEN,
    SCHEDULE_OPTIONS,
    SCHEDULES_NOT_A_DICT,
)
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.options import JobOptions
from django_ratequeue.engine.registry import check_call, registered_job
from django_ratequeue.exceptions import UnknownJob
from django_ratequeue.plugins.schedules.declarations import (
    CODE,
    ScheduleSpec,
    code_declarations,
    parse_spec,
    run_id,
)
from django_ratequeue.plugins.schedules.models import Schedule

logger = logging.getLogger("django_ratequeue.queue")


class ScheduleProblem(NamedTuple):
    """A schedule that cannot run: the check id, what is wrong, and a hint."""

    id: str
    message: str
    hint: str = ""


EXAMPLE = '{"nightly": {"function": "myapp.jobs.report", "cron": "0 3 * * *"}}'


def settings_schedules(value: Any) -> tuple[dict[str, ScheduleSpec], list[ScheduleProblem]]:
    """Return the valid schedules of ``RATEQUEUE["SCHEDULES"]`` by name, and the problems."""
    if not isinstance(value, Mapping):
        message = f'RATEQUEUE["SCHEDULES"] must be a dict of name -> schedule, got {value!r}.'
        return {}, [ScheduleProblem(SCHEDULES_NOT_A_DICT, message, f"e.g. {EXAMPLE}")]
    specs: dict[str, ScheduleSpec] = {}
    problems: list[ScheduleProblem] = []
    for name, raw in value.items():
        try:
            specs[name] = parse_spec(name, raw)
        except ValueError as error:
            where = f'RATEQUEUE["SCHEDULES"][{str(name)[:100]!r}]'
            message = f"{where} is invalid: {error}"
            problems.append(ScheduleProblem(SCHEDULE_INVALID, message, f"e.g. {EXAMPLE}"))
    return specs, problems


def declared_schedules() -> tuple[dict[str, ScheduleSpec], list[ScheduleProblem]]:
    """Return the valid declared schedules by name, and the problems of the others.

    Those of the settings first, then those of ``@job(schedule=...)``."""
    specs, problems = settings_schedules(ratequeue_settings().SCHEDULES)
    for path, raw in code_declarations().items():
        if path in specs:
            problems.append(
                ScheduleProblem(
                    SCHEDULE_NAME_TAKEN,
                    f'RATEQUEUE["SCHEDULES"] names {path!r}, the name of the schedule that '
                    f"@job(schedule=...) declares on {path}.",
                    "Give the settings' schedule another name.",
                )
            )
            continue
        try:
            specs[path] = parse_spec(path, raw, CODE)
        except ValueError as error:
            message = f"@job(schedule=...) on {path} is invalid: {error}"
            problems.append(ScheduleProblem(SCHEDULE_INVALID, message))
    return specs, problems


def runnable(spec: ScheduleSpec) -> ScheduleProblem | None:
    """Return why ``spec``'s runs could not be enqueued, or None when they can."""
    where = f"Schedule {spec.name!r}"
    try:
        job = registered_job(spec.function)
    except UnknownJob as error:
        return ScheduleProblem(SCHEDULE_FUNCTION, f"{where}: {error}")
    try:
        options = {**spec.options, "id": run_id(spec.name, datetime(2000, 1, 1))}
        JobOptions(options).template(job.path)
        check_call(job, spec.args, spec.kwargs)
    except (ValueError, TypeError, UnknownJob) as error:
        return ScheduleProblem(SCHEDULE_OPTIONS, f"{where}: {error}")
    return None


def schedule_problems() -> list[ScheduleProblem]:
    """Return every problem of the declared schedules (the system check's findings)."""
    specs, problems = declared_schedules()
    for spec in specs.values():
        problem = runnable(spec)
        if problem is not None:
            problems.append(problem)
    return problems


def sync_schedules(now: datetime) -> int:
    """Write the declared schedules into the table; return how many rows changed.

    A declaration that cannot run is left out (the system check says why) and its row,
    if any, is disabled as if it were no longer declared."""
    specs, _problems = declared_schedules()
    valid = {name: spec for name, spec in specs.items() if runnable(spec) is None}
    rows = Schedule.objects.in_bulk()
    new = [
        Schedule(name=name, next_run_at=spec.recurrence.next_after(now), **_fields(spec))
        for name, spec in valid.items()
        if name not in rows
    ]
    Schedule.objects.bulk_create(new, batch_size=1000)
    changed = len(new)
    for name, row in rows.items():
        if name in valid:
            changed += _sync_one(row, valid[name], now)
    for name, row in rows.items():
        if name not in valid and row.removed_at is None:
            Schedule.objects.filter(pk=name).update(removed_at=now, next_run_at=None)
            logger.warning("Schedule %r is no longer declared: disabled", name)
            changed += 1
    return changed


def _fields(spec: ScheduleSpec) -> dict[str, Any]:
    recurrence = spec.recurrence
    return {
        "source": spec.source,
        "function": spec.function,
        "cron": recurrence.cron,
        "every": recurrence.every,
        "timezone": recurrence.timezone,
        "args": spec.args,
        "kwargs": spec.kwargs,
        "options": spec.options,
        "misfire": spec.misfire,
        "declaration": spec.declaration(),
    }


def _sync_one(row: Schedule, spec: ScheduleSpec, now: datetime) -> int:
    """Update the row of ``spec``; return 1 if it changed, else 0."""
    if row.declaration == spec.declaration() and row.removed_at is None:
        return 0  # as declared before: the row's state and edits stand
    changes = _fields(spec)
    changes.update(removed_at=None, edited_at=None)
    same_times = (row.cron, row.every, row.timezone) == (
        changes["cron"],
        changes["every"],
        changes["timezone"],
    )
    if not row.paused and (row.next_run_at is None or not same_times):
        changes["next_run_at"] = spec.recurrence.next_after(now)
    Schedule.objects.filter(pk=spec.name).update(**changes)
    return 1

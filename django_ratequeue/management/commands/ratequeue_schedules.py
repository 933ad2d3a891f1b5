"""``manage.py ratequeue_schedules``: list the recurring schedules and their next runs.

``--next N`` shows each one's next N runs; ``--sync`` first writes the declarations into
the table, as the loop does when it starts leading; ``--json`` prints JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from django_ratequeue import clock
from django_ratequeue.jobs import LOOP, signal
from django_ratequeue.models import queue_db
from django_ratequeue.plugins.schedules.models import Schedule
from django_ratequeue.plugins.schedules.sync import declared_schedules, sync_schedules

MAX_NEXT = 1000


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def upcoming(row: Schedule, count: int) -> list[str]:
    """Return the next ``count`` run times of ``row`` from its next run, ISO-8601 in UTC."""
    if row.next_run_at is None or count <= 0:
        return []
    try:
        recurrence = row.recurrence
    except ValueError:
        return []
    times = [row.next_run_at]
    while len(times) < count:
        times.append(recurrence.next_after(times[-1]))
    return [moment.isoformat() for moment in times]


def describe(row: Schedule, count: int) -> dict[str, Any]:
    """Return what the command shows of one schedule."""
    try:
        runs = row.recurrence.describe()
    except ValueError as error:
        runs = f"invalid: {error}"
    state = "paused" if row.paused else "running"
    return {
        "name": row.name,
        "function": row.function,
        "runs": runs + (" (edited)" if row.edited_at else ""),
        "state": "no longer declared" if row.removed_at else state,
        "misfire": row.misfire,
        "next_run_at": _time(row.next_run_at),
        "last_run_at": _time(row.last_run_at),
        "enqueued": row.runs,
        "skipped": row.skipped,
        "last_skipped_at": _time(row.last_skipped_at),
        "last_error": row.last_error,
        "next": upcoming(row, count),
    }


class Command(BaseCommand):
    help = "List the recurring schedules, their state and their next runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--next", type=int, default=1, help="Show each one's next N runs.")
        parser.add_argument(
            "--sync", action="store_true", help="Write the declared schedules first."
        )
        parser.add_argument("--json", action="store_true", help="Print JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        count = options["next"]
        if not 0 <= count <= MAX_NEXT:
            raise CommandError(f"--next must be between 0 and {MAX_NEXT}, not {count}.")
        if options["sync"]:
            with transaction.atomic(using=queue_db()):
                changed = sync_schedules(clock.now())
                signal(LOOP)  # the resting loop reads the schedules' next run again
            self.stderr.write(f"Synced the declared schedules: {changed} changed.")
        rows = [describe(row, count) for row in Schedule.objects.order_by("name")]
        declared, problems = declared_schedules()
        missing = sorted(set(declared) - {row["name"] for row in rows})
        if options["json"]:
            self.stdout.write(json.dumps({"schedules": rows, "not_synced": missing}, indent=2))
            return
        for row in rows:
            # A @job(schedule=...) is named by its function: said once.
            calls = "" if row["function"] == row["name"] else f"{row['function']}, "
            self.stdout.write(
                f"{row['name']}: {calls}{row['runs']}, {row['state']}, "
                f"misfire {row['misfire']}; next {row['next_run_at'] or '-'}, "
                f"last {row['last_run_at'] or '-'}, {row['enqueued']} enqueued, "
                f"{row['skipped']} skipped"
            )
            for moment in row["next"][1:]:
                self.stdout.write(f"    then {moment}")
            if row["last_error"]:
                self.stdout.write(f"    last error: {row['last_error']}")
        for name in missing:
            self.stdout.write(f"{name}: declared, not synced yet (the loop syncs as it leads)")
        for problem in problems:
            self.stderr.write(f"{problem.id}: {problem.message}")
        if not rows and not missing:
            self.stdout.write("No schedules.")

"""Decide which due runs of a schedule to enqueue, and which a misfire policy skips.

A run is on time when it is due less than MISFIRE_GRACE ago: it is always enqueued.
Older ones were missed (nothing ran the loop then) and the schedule's policy decides:
``skip`` skips them, ``once`` enqueues the latest, ``all`` the latest ALL_LIMIT. Every
skipped run is counted. docs/schedules.md ("Misfires") tells why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_ratequeue.plugins.schedules.recurrence import Recurrence

# How late a run may be found and still count as on time.
MISFIRE_GRACE = timedelta(seconds=60)
# The most missed runs the ``all`` policy enqueues after one downtime.
ALL_LIMIT = 100
# The most due times one schedule's catch-up looks at in one step.
CHUNK = 10_000
# How many of the missed runs seen so far may still be enqueued, by policy.
CARRIED = {"skip": 0, "once": 1, "all": ALL_LIMIT}


@dataclass(frozen=True)
class CatchUp:
    """What to do with a schedule's due runs: enqueue ``runs``, count ``skipped``.

    ``next_run_at`` is the first time not decided yet (the schedule's next run when
    ``done``; else it is still due, and the next step goes on from there)."""

    runs: list[datetime]
    skipped: int
    last_skipped: datetime | None
    next_run_at: datetime
    done: bool


def due_times(recurrence: Recurrence, due: datetime, now: datetime, most: int) -> list[datetime]:
    """Return the run times from ``due`` up to ``now``, at most ``most`` + 1 of them.

    The extra one is the first time after the others (later than ``now`` when they are
    all the due ones)."""
    times = [due]
    while times[-1] <= now and len(times) <= most:
        times.append(recurrence.next_after(times[-1]))
    return times


def catch_up(
    recurrence: Recurrence, due: datetime, now: datetime, misfire: str, chunk: int = CHUNK
) -> CatchUp:
    """Return what to do with the runs due from ``due`` (the schedule's next run) to ``now``."""
    *times, after = due_times(recurrence, due, now, chunk)
    late = now - MISFIRE_GRACE
    missed = [t for t in times if t < late]
    carried = CARRIED[misfire]
    if after <= now:  # more due than one step looks at: decide the oldest, go on later
        decided = missed[: max(len(missed) - carried, 0)] or missed[:1]
        rest = times[len(decided)] if len(decided) < len(times) else after
        return CatchUp([], len(decided), decided[-1] if decided else None, rest, False)
    kept = missed[max(len(missed) - carried, 0) :] if carried else []
    skipped = missed[: len(missed) - len(kept)]
    runs = kept + times[len(missed) :]
    return CatchUp(runs, len(skipped), skipped[-1] if skipped else None, after, True)

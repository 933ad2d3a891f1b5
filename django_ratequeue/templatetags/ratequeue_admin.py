"""Show the monitor's figures in the admin's templates: capped counts and queue badges."""

from __future__ import annotations

from django import template

from django_ratequeue.monitor.counts import COLUMNS, QueueCounts, column_status
from django_ratequeue.monitor.snapshot import Condition, QueueState
from django_ratequeue.monitor.workers import NoWorker, no_worker

register = template.Library()

# The badge of each condition: (CSS class suffix, words).
BADGES: dict[Condition, tuple[str, str]] = {
    Condition.NO_WORKER: ("no-worker", "no worker"),
    Condition.PAUSED: ("paused", "paused"),
    Condition.SATURATED: ("saturated", "saturated"),
    Condition.RATE_BOUND: ("rate-bound", "rate-bound"),
    Condition.REMOTE: ("remote", "remote workers"),
}
# The badge of a queue in none of them.
CAN_START_MORE = ("ok", "can start more")


@register.filter
def capped_count(count: int, capped: bool) -> str:
    """Return a count for people: ``"10000+"`` when it stopped at its limit."""
    return f"{count}+" if capped else str(count)


@register.filter
def count_cells(queue: QueueCounts) -> list[tuple[str, str, int, str]]:
    """Return (column, job status to filter by, count, count shown) for each column."""
    return [
        (
            column,
            column_status(column),
            queue.counts[column],
            capped_count(queue.counts[column], column in queue.capped),
        )
        for column, _label in COLUMNS
    ]


@register.filter
def badges(queue: QueueState) -> list[tuple[str, str]]:
    """Return (CSS class suffix, words) for each condition of ``queue``, or "can start more"."""
    return [BADGES[condition] for condition in queue.conditions] or [CAN_START_MORE]


@register.inclusion_tag("admin/django_ratequeue/_no_worker.html")
def no_worker_banner(missing: NoWorker | None = None) -> dict[str, NoWorker]:
    """Show the banner of the workers missing (read now unless given), or nothing."""
    return {"missing": no_worker() if missing is None else missing}

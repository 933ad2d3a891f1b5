"""Fit the figures' series to the dashboard's windows, and rebuild each queue's depth."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from django_ratequeue.monitor.figures import Figures

Window = Literal["hour", "day"]
# The windows the charts cover, and the width of one bucket in each.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=1)),
    "day": (timedelta(days=1), timedelta(minutes=15)),
}
DEFAULT_WINDOW: Window = "hour"


@dataclass(frozen=True)
class Depth:
    """How many jobs a queue held at the end of a bucket.

    ``unfinished`` (scheduled, waiting, retrying or running) and, of them,
    ``running``."""

    start: datetime
    unfinished: int
    running: int


def window_bounds(window: Window, now: datetime) -> tuple[datetime, timedelta]:
    """Return (since, step) of ``window`` ending ``now``.

    ``since`` is the start of the step ``span`` before the one holding ``now`` (aligned
    as :func:`.figures.series` aligns its points), so that the series has ``span / step``
    points, the last one filling now.
    """
    span, step = WINDOWS[window]
    width = int(step.total_seconds())
    current = math.floor(now.timestamp()) // width * width
    return datetime.fromtimestamp(current, UTC) - (span - step), step


def with_arrivals(
    figures: list[Figures], arrivals: dict[datetime, int], step: timedelta
) -> list[Figures]:
    """Return ``figures`` with ``arrivals`` added to the ``enqueued`` of their points.

    ``arrivals`` are jobs by minute of creation, not counted in the rollups yet."""
    if not figures or not arrivals:
        return figures
    added: Counter[int] = Counter()
    for minute, jobs in arrivals.items():
        point = (minute - figures[0].start) // step
        if 0 <= point < len(figures):
            added[point] += jobs
    return [
        replace(point, enqueued=point.enqueued + added[n]) if added[n] else point
        for n, point in enumerate(figures)
    ]


def depth_series(figures: list[Figures], unfinished_now: int, running_now: int) -> list[Depth]:
    """Return the depth at the end of each bucket, rebuilt backwards from the counts now.

    Each later bucket's enqueues added unfinished jobs, its completions, final failures
    and cancels removed some; each start added a running job, each completion, failure or
    retry ended one. (A cancel of a running job is not told apart from one of a waiting
    job: running stays within 0 and unfinished.)
    """
    depth: list[Depth] = []
    unfinished, running = unfinished_now, running_now
    for bucket in reversed(figures):
        depth.append(Depth(bucket.start, unfinished, min(running, unfinished)))
        unfinished = max(
            0, unfinished - bucket.enqueued + bucket.completed + bucket.failed + bucket.canceled
        )
        running = max(
            0, running - bucket.started + bucket.completed + bucket.failed + bucket.retried
        )
    depth.reverse()
    return depth

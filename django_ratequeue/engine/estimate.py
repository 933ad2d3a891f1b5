"""What :meth:`.handles.Handle.eta` answers: when a job will start (:class:`Eta`).

The engine owns the answer's shape; the eta plug-in, which the engine asks through the
hook :func:`.handles.set_estimator`, works it out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

Basis = Literal[
    "reservation",  # its rate reservation gave the time: exact
    "schedule",  # a scheduled job's start_at
    "retry",  # a retrying job's back-off
    "rate_limit",  # when its queue's rate limit will hold its tokens
    "throughput",  # its place, its queue's slots and recent run time
    "paused",  # its queue is paused: no estimate
    "no_worker",  # no live worker runs its queue, or knows its function: no estimate
    "unknown",  # no run time measured yet and no free slot: no estimate
    "running",
    "finished",
]


@dataclass(frozen=True)
class Eta:
    """When a job will start, as far as the queue can tell now.

    ``position``: the unstarted jobs ahead of it in its queue and concurrency key, in the
    order the loop starts them (at most :data:`POSITION_LIMIT`; ``position_capped`` says
    it is at least that). ``earliest_start``: the earliest the limits allow (its
    ``start_at``, its rate limit's tokens, now), however long the jobs ahead run.
    ``estimated_start``: when it will likely start, estimated by ``basis``. A running or
    finished job has position 0 and neither time. Over HTTP, the position may be hidden
    (None, :func:`owner_view`). ``note``: what holds it up, in words ("no running worker
    knows `app.jobs.new_job`"), or ""."""

    position: int | None
    earliest_start: datetime | None
    estimated_start: datetime | None
    basis: Basis
    position_capped: bool | None = False
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        """Return the estimate as JSON values (times in ISO 8601)."""
        values = asdict(self)
        for name in ("earliest_start", "estimated_start"):
            moment = values[name]
            values[name] = None if moment is None else moment.isoformat()
        return values

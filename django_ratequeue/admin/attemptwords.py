"""An attempt told in words: its outcome, its lengths of time, its worker, and the whole
timeline in one sentence (the drawing's text alternative and the attempts' table)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise

from django.utils import timezone
from django.utils.text import Truncator

from django_ratequeue.jobs import AttemptInfo
from django_ratequeue.models import Outcome

# The table shows a local worker's id (a uuid's hex) and a remote worker's key name and
# instance cut to this many characters; the cell's tooltip holds the whole name.
LOCAL_WORKER_SHOWN = 9
REMOTE_WORKER_SHOWN = 24


def duration(seconds: float) -> str:
    """Return a short, readable length of time: "0 s", "250 ms", "1.5 s", "2 min 30 s", "3 h"."""
    if seconds <= 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, rest = divmod(round(seconds / 60), 60)
    if hours >= 48:
        return f"{seconds / 86400:.3g} d"
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def outcome_label(attempt: AttemptInfo) -> str:
    """Return what became of the attempt, in words."""
    if attempt.outcome:
        return str(Outcome(attempt.outcome).label)
    if attempt.ended_at is not None:
        return "ended before it started"
    return "running" if attempt.started_at else "waiting for a runner"


def summary(attempts: Sequence[AttemptInfo], next_start: datetime | None) -> str:
    """Return the timeline in one sentence, for screen readers.

    How many attempts, how they ended, and what comes next."""
    if not attempts:
        return "No attempt yet."
    counts = Counter(outcome_label(a).lower() for a in attempts)
    parts = ", ".join(f"{n} {label}" for label, n in counts.items())
    plural = "attempt" if len(attempts) == 1 else "attempts"
    text = f"{len(attempts)} {plural}: {parts}."
    backoffs = [
        (later.dispatched_at - earlier.ended_at).total_seconds()
        for earlier, later in pairwise(attempts)
        if earlier.ended_at is not None
    ]
    if len(backoffs) > 4:
        text += (
            f" Back-off between attempts: from {duration(min(backoffs))} "
            f"to {duration(max(backoffs))}."
        )
    elif backoffs:
        text += f" Back-off between attempts: {', '.join(duration(s) for s in backoffs)}."
    if next_start is not None:
        text += f" Next attempt at {timezone.localtime(next_start):%H:%M:%S}."
    return text


def worker_shown(worker: str, remote: bool) -> str:
    """Return who ran an attempt (its worker label), in short.

    A remote worker's key name and instance, the start of a local worker's id, or "-"
    for nobody yet."""
    return Truncator(worker).chars(REMOTE_WORKER_SHOWN if remote else LOCAL_WORKER_SHOWN) or "-"

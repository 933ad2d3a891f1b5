"""The jobs the queue benchmark runs, plain functions that ours and django-q2 both call.

Nothing here imports django-ratequeue: django-q2 "alone" runs them without our app.
"""

from __future__ import annotations

import time


def noop() -> None:
    """The unit of work of the throughput runs: nothing, so only the queue's cost shows."""


def record_start(seq: int) -> None:
    """The latency probe: store the moment this job began."""
    from bench.models import JobStart

    started = time.time()
    JobStart.objects.create(seq=seq, started=started)

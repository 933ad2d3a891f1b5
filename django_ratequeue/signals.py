"""The lifecycle's Django signals, and its log records: one announcement of each event.

Every event is announced once the transaction that made it commits: a log record of the
``django_ratequeue.lifecycle`` logger whose ``extra`` holds the event's fields (a JSON
formatter prints them), then the signal, to receivers connected in this process. A
receiver that raises is logged (by Django's ``send_robust``) and stops neither the
sender nor the other receivers.
docs/signals.md lists the events, their arguments and where each is sent.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

# The job was written (``enqueue``, ``enqueue_many``, the HTTP API, a schedule's run).
# Arguments: job_id, func, queue.
job_enqueued = Signal()
# A worker claimed the attempt and starts it now (a local runner or a remote worker).
# Arguments: job_id, func, queue, attempt_id, worker, remote.
attempt_started = Signal()
# The loop took in the end of an attempt that had started.
# Arguments: job_id, func, queue, attempt_id, outcome (an Outcome value), run_seconds.
attempt_finished = Signal()
# The loop moved the job to a final status (complete, failed or canceled).
# Arguments: job_id, func, queue, status, attempts.
job_finished = Signal()

SIGNALS = {
    "job_enqueued": job_enqueued,
    "attempt_started": attempt_started,
    "attempt_finished": attempt_finished,
    "job_finished": job_finished,
}
logger = logging.getLogger("django_ratequeue.lifecycle")


def listened(event: str) -> bool:
    """Say whether anything hears ``event``: a connected receiver or the lifecycle's log."""
    return SIGNALS[event].has_listeners() or logger.isEnabledFor(logging.INFO)


def announce(event: str, using: str, records: list[dict[str, Any]]) -> None:
    """Log and send ``event`` for each of ``records`` once ``using``'s transaction commits.

    Nothing is sent if it rolls back; at once outside a transaction. Each record holds the
    event's arguments, ``func`` (the job's dotted path) among them: it is the sender."""
    if records and listened(event):
        transaction.on_commit(lambda: _send(event, records), using=using)


def _send(event: str, records: list[dict[str, Any]]) -> None:
    signal = SIGNALS[event]
    for record in records:
        logger.info("%s %s", event, record["job_id"], extra={"event": event, **record})
        # A receiver that raises is logged by Django (the "django.dispatch" logger).
        signal.send_robust(sender=record["func"], **record)

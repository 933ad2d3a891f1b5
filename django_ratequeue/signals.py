"""The lifecycle's Django signals, and its log records: one announcement of each event.

Every event is announced once the transaction that made it commits: a log record of the
``django_ratequeue.lifecycle`` logger whose ``extra`` holds the event's fields (a JSON
formatter prints them), then the signal, to receivers connected in this process. A
receiver that raises is logged (by Django's ``send_robust``) and stops neither the
sender nor the other receivers. Each record's message tells the event in words, and a
qcluster worker whose LOGGING says nothing of this logger prints them (:func:`talk`).
docs/signals.md lists the events, their arguments and where each is sent.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

# The job was written (``enqueue``, ``enqueue_many``, the HTTP API, a schedule's run, an
# ``on_complete`` callback): :mod:`.queue.creation` announces every job it creates.
# Arguments: job_id, func, queue.
job_enqueued = Signal()
# A worker claimed the attempt and starts it now (a local runner or a remote worker).
# Arguments: job_id, func, queue, attempt_id, worker, remote.
attempt_started = Signal()
# The loop took in the end of an attempt that had started.
# Arguments: job_id, func, queue, attempt_id, outcome (an Outcome value), run_seconds,
# error (the error's first line, "" on success), status (the job's, after this end),
# retry_at (an ISO 8601 time when a retry is scheduled, else None).
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
# What a worker prints when LOGGING configures nothing for the lifecycle (django-q's style).
TERMINAL_FORMAT = "%(asctime)s [ratequeue] %(levelname)s %(message)s"
# The outcomes of an attempt that ended well.
GOOD_OUTCOMES = frozenset({"succeeded"})


def listened(event: str) -> bool:
    """Say whether anything hears ``event``: a connected receiver or the lifecycle's log.

    The log hears an attempt's end at WARNING already (a failure is a warning)."""
    least = logging.WARNING if event == "attempt_finished" else logging.INFO
    return SIGNALS[event].has_listeners() or logger.isEnabledFor(least)


def announce(event: str, using: str, records: list[dict[str, Any]]) -> None:
    """Log and send ``event`` for each of ``records`` once ``using``'s transaction commits.

    Nothing is sent if it rolls back; at once outside a transaction. Each record holds the
    event's arguments, ``func`` (the job's dotted path) among them: it is the sender."""
    if records and listened(event):
        transaction.on_commit(lambda: _send(event, records), using=using)


def _send(event: str, records: list[dict[str, Any]]) -> None:
    signal = SIGNALS[event]
    for record in records:
        level = level_of(event, record)
        if logger.isEnabledFor(level):
            logger.log(level, "%s", told(event, record), extra={"event": event, **record})
        # A receiver that raises is logged by Django (the "django.dispatch" logger).
        signal.send_robust(sender=record["func"], **record)


def level_of(event: str, record: dict[str, Any]) -> int:
    """Return the level of ``event``'s log record: WARNING for an attempt that failed."""
    if event == "attempt_finished" and record["outcome"] not in GOOD_OUTCOMES:
        return logging.WARNING
    return logging.INFO


def told(event: str, record: dict[str, Any]) -> str:
    """Return ``event`` told in words, as a log line: the job, then what happened."""
    job = f"{record['func']}[{record['job_id']}]"
    if event == "job_enqueued":
        return f"{job} enqueued on queue {record['queue']!r}"
    if event == "attempt_started":
        where = "remote worker" if record["remote"] else "worker"
        return f"{job} started on queue {record['queue']!r} by {where} {record['worker']}"
    if event == "job_finished":
        attempts = record["attempts"]
        return f"{job} {record['status']} after {attempts} attempt{'s' * (attempts != 1)}"
    return f"{job} {_attempt_end(record)}"


def _attempt_end(record: dict[str, Any]) -> str:
    """Return how an attempt ended and what follows, in words."""
    took = f"{record['run_seconds']:.3f} s"
    if record["outcome"] in GOOD_OUTCOMES:
        return f"succeeded in {took}"
    said = {"timed_out": "timed out", "worker_lost": "lost its worker", "non_retryable": "failed"}
    text = f"{said.get(record['outcome'], 'failed')} after {took}"
    if record["error"]:
        text += f": {record['error']}"
    if record["retry_at"] is not None:
        return f"{text}; retry at {record['retry_at']}"
    return f"{text}; job {record['status']}"


class TerminalLines(logging.Filter):
    """Keep the lines a person at the terminal reads: starts, ends and cancellations.

    The end of an attempt already tells a job that completed or failed; an enqueue is the
    web's news."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Say whether ``record`` is printed."""
        event = getattr(record, "event", None)
        if event == "job_enqueued":
            return False
        return event != "job_finished" or getattr(record, "status", None) == "canceled"


def talk() -> None:
    """Print the package's log at INFO to stderr, unless LOGGING configured its loggers.

    A qcluster worker calls it: the lines Celery and django-q print, one per start and end
    of a job, and who leads the loop. A level or a handler set on
    ``django_ratequeue.lifecycle``, ``django_ratequeue`` or the root logger leaves logging
    as LOGGING says."""
    package = logging.getLogger("django_ratequeue")
    if logging.getLogger().handlers or any(
        one.level != logging.NOTSET or one.handlers for one in (logger, package)
    ):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(TERMINAL_FORMAT, datefmt="%H:%M:%S"))
    handler.addFilter(TerminalLines())
    package.addHandler(handler)
    package.setLevel(logging.INFO)

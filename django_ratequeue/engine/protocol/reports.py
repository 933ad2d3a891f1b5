"""What a worker tells of the attempts it holds: progress, output and outcomes.

Progress and output as they run, outcomes as they end (a batch in one statement)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import Max, Sum
from django.db.models.functions import Length

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.models import REPORT_FIELDS, Attempt, OutputChunk, queue_db
from django_ratequeue.engine.progress import UNSET, checked_progress, checked_text, store
from django_ratequeue.engine.protocol.claims import Claimant, lock_held, through_reconnects
from django_ratequeue.engine.protocol.outcome import REFUSED, Report
from django_ratequeue.engine.protocol.sql import write_outcomes

T = TypeVar("T")
# The report's columns, after ended_at (which every report writes).
OUTCOME_FIELDS = ("outcome", "result", "error", "traceback", "exception_class_path")


@dataclass(frozen=True)
class Ended:
    """An attempt that ended with ``report`` at ``ended_at`` (None: as it is reported).

    A local runner's comes with its ``started_at`` too, written again should a database
    crash have lost its claim's."""

    attempt_id: int
    report: Report
    ended_at: datetime | None = None
    started_at: datetime | None = None


def report(claimant: Claimant, ended: Sequence[Ended]) -> dict[int, Report | None]:
    """End each attempt ``claimant`` holds with its report, in one statement.

    The statement signals the loop. A local runner's report goes through lost
    connections.

    Should the database refuse a value (one that slipped past :class:`Report`'s checks),
    the attempts are ended one by one, and one whose report it still refuses is ended as
    failed, with the database's reason: the others are not held up.

    For a remote claimant, return per attempt the report stored, or None if no worker of
    its key holds it (any more): the same report sent again after its answer was lost
    finds its own effect, and is answered the same, changing nothing."""
    if not ended:
        return {}
    now = clock.now()
    fields = REPORT_FIELDS if claimant.key is None else REPORT_FIELDS[1:]
    rows = {e.attempt_id: _row(e, now) for e in ended}
    held, params = claimant.holds_sql()
    durable: Callable[[Callable[[], int]], int] = (
        through_reconnects if claimant.key is None else _at_once
    )

    def write(attempts: list[Attempt]) -> int:
        local = claimant.key is None
        return durable(lambda: write_outcomes(attempts, fields, held, params, local))

    try:
        write(list(rows.values()))
    except REFUSED:
        for row in rows.values():
            try:
                write([row])
            except REFUSED as error:
                _set(row, Report.refused(error))
                write([row])
    if claimant.key is None:
        return {}
    return _answers(claimant, rows)


def _at_once(action: Callable[[], T]) -> T:
    return action()


def _row(ended: Ended, now: datetime) -> Attempt:
    attempt = Attempt(pk=ended.attempt_id, started_at=ended.started_at)
    attempt.ended_at = ended.ended_at or now
    _set(attempt, ended.report)
    return attempt


def _set(attempt: Attempt, report: Report) -> None:
    for name, value in report.fields().items():
        setattr(attempt, name, value)


def _answers(claimant: Claimant, rows: dict[int, Attempt]) -> dict[int, Report | None]:
    """Return per attempt the report it was ended with, or None.

    The report is returned if a worker like ``claimant`` ended the attempt with the values
    of ``rows`` (now, or the same report before)."""
    stored = {
        values.pop("pk"): values
        for values in Attempt.objects.filter(claimant.ended_by(), pk__in=list(rows))
        .exclude(ended_at=None)
        .values("pk", *OUTCOME_FIELDS)
    }
    answers: dict[int, Report | None] = {}
    for attempt_id, row in rows.items():
        sent = {name: getattr(row, name) for name in OUTCOME_FIELDS}
        answers[attempt_id] = Report(**sent) if stored.get(attempt_id) == sent else None
    return answers


def report_progress(claimant: Claimant, attempt_id: int, data: Any) -> None:
    """Store the job's progress (a JSON object).

    Raise a ValueError or TypeError if it is not one the job could report itself."""
    value = checked_progress(data)
    with transaction.atomic(using=queue_db()):
        job_id = lock_held(claimant, attempt_id)
        store(job_id, value, 0, [])


def append_output(claimant: Claimant, attempt_id: int, index: int, text: Any) -> None:
    """Store one piece of output, numbered ``index``.

    The claim gives the first number; the worker counts on from it. Sent again, the same
    piece is a success that changes nothing; another piece with a number already used, or
    one that leaves a gap, is a ValueError: numbers stay below the count of pieces, which
    MAX_OUTPUT_LENGTH bounds."""
    settings = ratequeue_settings()
    text = checked_text(text)
    if not text or len(text) > settings.MAX_OUTPUT_CHUNK_LENGTH:
        raise ValueError(
            f"text must hold 1 to {settings.MAX_OUTPUT_CHUNK_LENGTH} characters "
            '(RATEQUEUE["MAX_OUTPUT_CHUNK_LENGTH"]).'
        )
    with transaction.atomic(using=queue_db()):
        job_id = lock_held(claimant, attempt_id)
        chunks = OutputChunk.objects.filter(job_id=job_id)
        existing = chunks.filter(index=index).values_list("text", flat=True).first()
        if existing is not None:
            if existing != text:
                raise ValueError(f"Output {index} of this job is already another text.")
            return
        written = chunks.aggregate(length=Sum(Length("text")), last=Max("index"))
        following = (written["last"] or 0) + 1
        if index != following:
            raise ValueError(
                f"index must be {following}, the number after the job's last piece of output "
                "(or that of a piece sent already, sent again)."
            )
        if (written["length"] or 0) + len(text) > settings.MAX_OUTPUT_LENGTH:
            raise ValueError(
                f"The job's output would exceed {settings.MAX_OUTPUT_LENGTH} characters "
                '(RATEQUEUE["MAX_OUTPUT_LENGTH"], all its attempts together).'
            )
        store(job_id, UNSET, index, [text])

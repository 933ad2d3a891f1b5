"""How a batch ends: found done, marked finished and its callback created, exactly once.

The loop calls :class:`BatchEnds` after the transitions of its step, for the batches of
the jobs that reached a final status; the seal of a batch (``with batch()`` exiting)
calls :func:`finish_done_batches` too, and a sweep finds any sealed batch left behind.
docs/batches.md tells why this is exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Max

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine.creation import create_callback
from django_ratequeue.engine.models import Job, Status, new_job_id
from django_ratequeue.engine.moves import Moves
from django_ratequeue.plugins.batches.models import (
    UNFINISHED_STATUSES,
    Batch,
    batch_callback_id,
    batch_jobs,
)

# Sealed batches the sweep looks at, at most, per run.
SWEEP_LIMIT = 100


def finish_batches(batch_ids: Iterable[str], now: datetime) -> list[str]:
    """Finish those of the batches that are sealed and whose jobs all ended; return them.

    A batch whose jobs all ended has its row locked (``select_for_update``), then its
    jobs looked at again: the seal locks the row before it looks at the jobs, so this
    and a seal of the same batch run one after the other, and whichever comes second
    sees what the first committed (the look before the lock only spares the lock to the
    batches still running). Must run in a transaction."""
    ids = sorted(set(filter(None, batch_ids)))
    ended = [batch_id for batch_id in ids if not has_unfinished_jobs(batch_id)]
    if not ended:
        return []
    candidates = list(
        Batch.objects.select_for_update()
        .filter(pk__in=ended, finished_at=None, sealed_at__isnull=False)
        .order_by("pk")
        .only("pk", "on_complete", "context", "owner")
    )
    return [
        batch.pk
        for batch in candidates
        if not has_unfinished_jobs(batch.pk) and finish(batch, now)
    ]


def has_unfinished_jobs(batch_id: str) -> bool:
    """Say whether a job of batch ``batch_id`` has not ended: one index read.

    The unfinished statuses all sort after the final ones, so the batch's highest status
    says: ``max(status)`` is the last entry of the batch in the index ``(batch_id,
    status)``, which the planner reads whatever its statistics say (a probe with
    ``LIMIT 1`` it may answer with a scan of the table, believing that many rows match)."""
    highest = batch_jobs(batch_id).aggregate(highest=Max("status"))["highest"]
    return highest in UNFINISHED_STATUSES


def batch_outcome(batch: Batch) -> dict[str, Any]:
    """Return what the callback of ``batch`` receives: its jobs' ids by how they ended."""
    ended: dict[str, list[str]] = {Status.COMPLETE: [], Status.FAILED: [], Status.CANCELED: []}
    rows = batch_jobs(batch.pk).order_by("created_at", "pk")
    for job_id, status in rows.values_list("pk", "status"):
        ended.setdefault(status, []).append(job_id)
    return {
        "batch_id": batch.pk,
        "total": sum(len(ids) for ids in ended.values()),
        "succeeded": ended[Status.COMPLETE],
        "failed": ended[Status.FAILED],
        "canceled": ended[Status.CANCELED],
        "context": batch.context,
    }


def finish(batch: Batch, now: datetime) -> bool:
    """Mark ``batch`` finished and create its callback; return False if it was already.

    One conditional UPDATE decides, and the callback's id derives from the batch's: the
    callback is created once, in the transaction that marks the batch finished (a taken
    id is skipped). One the enqueue checks refuse is logged, and the batch keeps no
    ``callback_id``."""
    outcome = batch_outcome(batch)
    callback_id = batch_callback_id(batch.pk) if batch.on_complete else ""
    marked = Batch.objects.filter(pk=batch.pk, finished_at=None).update(
        finished_at=now, outcome=outcome, total=outcome["total"], callback_id=callback_id
    )
    if not marked:
        return False
    if callback_id:
        created = create_callback(
            batch.on_complete,
            outcome,
            now,
            owner=batch.owner,
            job_id=callback_id,
            of=f"batch {batch.pk!r}",
        )
        if not created:  # refused by the checks: the batch has no callback job
            Batch.objects.filter(pk=batch.pk).update(callback_id="")
    return True


def finished_batch_ids(moves: Moves, start: int) -> set[str]:
    """Return the batches of the jobs that finished in ``moves`` from index ``start`` on.

    A job read without its ``batch_id`` has it read for it, all in one query."""
    jobs = moves.finished[start:]
    unread = [job.pk for job in jobs if "batch_id" in job.get_deferred_fields()]
    ids = {job.batch_id for job in jobs if "batch_id" not in job.get_deferred_fields()}
    if unread:
        ids.update(Job.objects.filter(pk__in=unread).values_list("batch_id", flat=True))
    ids.discard("")
    return ids


class BatchEnds:
    """Finish the batches whose last job ended in this step (a loop phase, run twice).

    Before the starts, so that the callbacks start in the same step; after them, for the
    jobs that the dispatch failed (then the loop steps again to start the callbacks).
    Every WATCHDOG_INTERVAL it also sweeps the sealed batches not finished yet."""

    def __init__(self, settings: RateQueueSettings) -> None:
        self.interval = settings.WATCHDOG_INTERVAL
        self.last_sweep = 0.0
        # The moves of the step seen last, and how many of its finished jobs were looked at.
        self.moves: Moves | None = None
        self.seen = 0

    def __call__(self, now: datetime, moves: Moves) -> bool:
        """Finish the batches of the jobs finished since the last call; return whether any."""
        if moves is not self.moves:
            self.moves, self.seen = moves, 0
        ids = finished_batch_ids(moves, self.seen) if len(moves.finished) > self.seen else set()
        self.seen = len(moves.finished)
        if time.monotonic() - self.last_sweep >= self.interval:
            self.last_sweep = time.monotonic()
            ids.update(sealed_unfinished())
        return bool(ids) and bool(finish_batches(ids, now))


def sealed_unfinished() -> list[str]:
    """Return the oldest sealed batches not finished (the partial index ratequeue_batch_ending)."""
    rows = Batch.objects.filter(finished_at=None, sealed_at__isnull=False).order_by("sealed_at")
    return list(rows.values_list("pk", flat=True)[:SWEEP_LIMIT])


def new_batch_id() -> str:
    """Return a new batch's id: sorted by creation time, as a job's."""
    return new_job_id()

"""Batches: ``with batch(on_complete=...)`` around enqueues, and the :class:`BatchHandle`.

The jobs enqueued inside the block belong to the batch; its ``on_complete`` job runs once,
when every one of them has ended (:mod:`.batchends`). docs/batches.md tells the rules.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token
from types import TracebackType
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Count

from django_ratequeue import clock
from django_ratequeue.engine.bounds import check_json, check_text
from django_ratequeue.engine.handles import (
    Handle,
    check_timeout,
    owner_label,
    refuse_in_event_loop,
)
from django_ratequeue.engine.models import FINAL_STATUSES, CancelRequest, Job, Status, queue_db
from django_ratequeue.engine.registry import function_path
from django_ratequeue.engine.subtasks import current_job_id
from django_ratequeue.engine.wakeup import LOOP, signal
from django_ratequeue.exceptions import BatchDoesNotExist
from django_ratequeue.plugins.batches.ends import finish_batches, new_batch_id
from django_ratequeue.plugins.batches.models import Batch, batch_jobs
from django_ratequeue.plugins.batches.scope import (
    current_batch_id,
    enter_batch,
    joining,
    leave_batch,
)

R = TypeVar("R")
OWNER_MAX_LENGTH = Batch._meta.get_field("owner").max_length or 255
# The longest pause between two looks at a batch that is waited on.
LONGEST_PAUSE = 0.5


class BatchHandle:
    """Refer to one batch by id, as seen by ``owner``: only that owner's batch is visible."""

    def __init__(self, id: str, owner: Any = None) -> None:
        self.id = id
        self.owner = owner_label(owner)

    def __repr__(self) -> str:
        return f"<BatchHandle {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BatchHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _batch(self, *fields: str) -> Batch:
        """Return the batch, as this handle may see it (another owner's looks missing)."""
        try:
            return Batch.objects.only(*fields).get(pk=self.id, owner=self.owner)
        except Batch.DoesNotExist:
            raise BatchDoesNotExist(missing_batch(self.id)) from None

    def status(self) -> dict[Status, int]:
        """Return how many of the batch's jobs are in each status (every status named)."""
        self._batch("pk")
        return status_counts(self.id)

    def progress(self) -> dict[str, int]:
        """Return ``{"done": jobs ended, "total": jobs}`` of the batch, as counted now."""
        counts = self.status()
        done = sum(counts[status] for status in FINAL_STATUSES)
        return {"done": done, "total": sum(counts.values())}

    def finished(self) -> bool:
        """Say whether the batch has finished: sealed, and every one of its jobs ended."""
        return self._batch("finished_at").finished_at is not None

    def jobs(self) -> list[Handle[Any]]:
        """Return the handles of the batch's jobs, in the order they were enqueued."""
        self._batch("pk")
        rows = batch_jobs(self.id).order_by("created_at", "pk")
        return [Handle(job_id, owner=owner) for job_id, owner in rows.values_list("pk", "owner")]

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until the batch has finished and return its outcome.

        That is what its callback receives: ``{"batch_id", "total", "succeeded",
        "failed", "canceled", "context"}``, the three lists of job ids. Raise
        ``TimeoutError`` when ``timeout`` seconds pass first."""
        check_timeout(timeout)
        refuse_in_event_loop()
        look = self._looker(timeout)
        while not isinstance(found := look(), dict):
            time.sleep(found)
        return found

    async def aresult(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait as :meth:`result` does, from async code."""
        check_timeout(timeout)
        look = sync_to_async(self._looker(timeout))
        while not isinstance(found := await look(), dict):
            await asyncio.sleep(found)
        return found

    def _looker(self, timeout: float | None) -> Callable[[], dict[str, Any] | float]:
        """Return a look at the batch: its outcome once finished, else the pause to take."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = [0.005]

        def look() -> dict[str, Any] | float:
            batch = self._batch("finished_at", "outcome")
            if batch.finished_at is not None:
                outcome: dict[str, Any] = batch.outcome or {}
                return outcome
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                progress = self.progress()
                raise TimeoutError(
                    f"Batch {self.id} did not finish within {timeout} seconds "
                    f"({progress['done']} of its {progress['total']} jobs ended)."
                )
            wait = pause[0] if deadline is None else min(pause[0], deadline - now)
            pause[0] = min(pause[0] * 1.5, LONGEST_PAUSE)
            return max(wait, 0)

        return look

    def cancel(self) -> None:
        """Ask the loop to cancel every job of the batch; the batch then finishes.

        Jobs not started are canceled at once, running ones when their attempt ends."""
        self._batch("pk")
        with transaction.atomic(using=queue_db()):
            Batch.objects.filter(pk=self.id, canceled_at=None).update(canceled_at=clock.now())
            CancelRequest.objects.create(batch_id=self.id)
            signal(LOOP)

    @contextmanager
    def adding(self) -> Iterator[BatchHandle]:
        """Make the jobs enqueued in this block join this batch (fan-out).

        Only from inside a running job of the batch (the batch cannot finish while it
        runs), or inside the batch's own ``with`` block; else raise ValueError."""
        if current_batch_id() != self.id:
            running = current_job_id()
            joined = running and Job.objects.filter(pk=running, batch_id=self.id).exists()
            if not joined:
                raise ValueError(
                    f"Jobs can join batch {self.id} only inside its `with batch()` block or "
                    "from a running job of the batch: elsewhere, the batch may have finished."
                )
        self._batch("pk")
        with joining(self.id):
            yield self


class HandleList(list[Handle[R]]):
    """The handles ``enqueue_many`` returns; ``batch`` is their batch's with ``batch=True``."""

    batch: BatchHandle | None = None


class BatchBlock:
    """The ``with`` block of a new batch (what :func:`batch` returns), sync or async.

    Entering it writes the batch; the jobs enqueued inside join it; leaving it seals the
    batch, even when the block raised."""

    def __init__(self, on_complete: Any, context: Any, owner: Any) -> None:
        self.on_complete = "" if on_complete is None else function_path(on_complete, "on_complete")
        check_json("context", context)
        self.context = context
        self.owner = check_text("owner", owner_label(owner))
        if len(self.owner) > OWNER_MAX_LENGTH:
            raise ValueError(f"owner must be at most {OWNER_MAX_LENGTH} characters.")
        self.handle: BatchHandle | None = None
        self.token: Token[str] | None = None

    def open(self) -> BatchHandle:
        """Write the batch, not sealed, and return its handle."""
        batch = Batch.objects.create(
            id=new_batch_id(),
            owner=self.owner,
            on_complete=self.on_complete,
            context=self.context,
            created_at=clock.now(),
        )
        return BatchHandle(batch.pk, owner=self.owner or None)

    def __enter__(self) -> BatchHandle:
        self.handle = self.open()
        self.token = enter_batch(self.handle.id)
        return self.handle

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self.handle is not None and self.token is not None
        leave_batch(self.token)
        seal(self.handle.id)

    async def __aenter__(self) -> BatchHandle:
        self.handle = await sync_to_async(self.open)()
        self.token = enter_batch(self.handle.id)
        return self.handle

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self.handle is not None and self.token is not None
        leave_batch(self.token)
        await sync_to_async(seal)(self.handle.id)


def batch(on_complete: Any = None, context: Any = None, *, owner: Any = None) -> BatchBlock:
    """Group the jobs enqueued in a ``with`` (or ``async with``) block into a new batch.

    ``on_complete`` (a registered job, or its dotted path) runs once when every job of
    the batch has ended, with one argument: ``{"batch_id", "total", "succeeded",
    "failed", "canceled", "context"}``. The block gives the :class:`BatchHandle`."""
    return BatchBlock(on_complete, context, owner)


def batch_block(spec: bool | Mapping[str, Any], owner: Any) -> BatchBlock:
    """Return the batch that ``enqueue_many(..., batch=spec)`` asks for.

    ``spec`` is True, or the arguments of :func:`batch` as a dict."""
    if spec is True:
        return BatchBlock(None, None, owner)
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"batch must be True or a dict of batch() arguments (on_complete, context), "
            f"not {spec!r}."
        )
    unknown = sorted(set(spec) - {"on_complete", "context"})
    if unknown:
        raise ValueError(f"Unknown batch option(s): {', '.join(map(str, unknown))}.")
    return BatchBlock(spec.get("on_complete"), spec.get("context"), owner)


def seal(batch_id: str) -> None:
    """Seal the batch (no more jobs join it but from its own jobs), and finish it if done.

    Its row is locked before its jobs are counted, as the loop locks it before looking
    at them: whichever of the two comes second sees the other's work."""
    now = clock.now()
    with transaction.atomic(using=queue_db()):
        list(Batch.objects.select_for_update().filter(pk=batch_id).values_list("pk"))
        total = batch_jobs(batch_id).count()
        Batch.objects.filter(pk=batch_id, sealed_at=None).update(sealed_at=now, total=total)
        finish_batches([batch_id], now)
        signal(LOOP)


def status_counts(batch_id: str) -> dict[Status, int]:
    """Return how many jobs of the batch are in each status, in one query."""
    counts = {status: 0 for status in Status}
    rows = batch_jobs(batch_id).values_list("status").annotate(n=Count("pk"))
    for status, number in rows.order_by():
        counts[Status(status)] = number
    return counts


def get_batch(id: str, owner: Any = None) -> BatchHandle:
    """Rebuild the handle of an existing batch, or raise :class:`BatchDoesNotExist`."""
    handle = BatchHandle(id, owner=owner)
    handle._batch("pk")
    return handle


def current_batch() -> BatchHandle | None:
    """Return the batch of the running job (or of the ``with`` block) here, if any.

    Its handle sees the batch as its owner does: ``current_batch().adding()`` lets a
    job of a batch enqueue more jobs into it."""
    batch_id = current_batch_id()
    if not batch_id and current_job_id():
        batch_id = Job.objects.filter(pk=current_job_id()).values_list("batch_id", flat=True)[0]
    if not batch_id:
        return None
    owner = Batch.objects.filter(pk=batch_id).values_list("owner", flat=True).first()
    if owner is None:
        return None
    return BatchHandle(batch_id, owner=owner or None)


def missing_batch(id: str) -> str:
    return (
        f"There is no batch with id {id!r}: finished batches are pruned RETENTION seconds "
        "after they end."
    )

"""Waiting on a subtask from inside a running job.

``handle.result()`` called by a job on another job's handle (``await handle.aresult()`` in
an ``async def`` job) gives the caller's slots back while it waits, and takes them back
once the loop grants them; a wait that can never end raises
:class:`~django_ratequeue.RecursiveWaitDeadlock`. docs/queues.md ("Waiting on subtasks")
tells the rules.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import timedelta

from asgiref.sync import sync_to_async

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.capacity import Capacity
from django_ratequeue.engine.models import Attempt, Job, Status, Wait, WorkerHeartbeat
from django_ratequeue.engine.reconnects import job_call
from django_ratequeue.engine.wakeup import LOOP, signal
from django_ratequeue.exceptions import RecursiveWaitDeadlock

# The attempt the runner is executing in this context, if any.
current_attempt: ContextVar[Attempt | None] = ContextVar("ratequeue_attempt", default=None)

NOT_STARTED = (Status.SCHEDULED, Status.WAITING, Status.RETRYING)


def current_job_id() -> str:
    attempt = current_attempt.get()
    return attempt.job_id if attempt is not None else ""


@job_call
def check_wait(parent: Attempt, child: Job) -> None:
    """Raise RecursiveWaitDeadlock if ``parent`` waiting on ``child`` could never end."""
    chain = _ancestry(parent, child)
    capacity = Capacity()  # the limits the dispatch applies
    limits = capacity.limits(child.queue)
    limit = capacity.limit_of(child.queue, child.concurrency_key, child.max_concurrency)
    if (limit == 0 or limits.max_concurrency == 0) and child.status in NOT_STARTED:
        where = "which is paused" if limits.max_concurrency == 0 else "whose key's limit is 0"
        raise RecursiveWaitDeadlock(
            f"Job {parent.job_id} waits on job {child.pk} in queue {child.queue!r}, {where}: "
            "it would never start.",
            queue=child.queue,
            chain=[child.pk, parent.job_id],
        )
    if child.queue == parent.queue and child.status in NOT_STARTED:
        _check_lending(parent, child, chain, limit, limits.total_concurrency)


def _ancestry(parent: Attempt, child: Job) -> list[str]:
    """Return the chain from ``child`` up through ``parent``'s job and the jobs that
    enqueued it; raise RecursiveWaitDeadlock if ``child`` is one of them."""
    chain = [child.pk]
    ancestor = parent.job_id
    while ancestor:
        chain.append(ancestor)
        if ancestor == child.pk:
            raise RecursiveWaitDeadlock(
                f"Job {parent.job_id} waits on job {child.pk}, which is itself or one of the "
                "jobs it was enqueued by: that wait could never end.",
                queue=child.queue,
                chain=chain,
            )
        ancestor = (
            Job.objects.filter(pk=ancestor).values_list("parent_id", flat=True).first() or ""
        )
    return chain


def _check_lending(
    parent: Attempt, child: Job, chain: list[str], limit: int, total: int | None
) -> None:
    """Raise RecursiveWaitDeadlock if the parent's queue has no slot left to lend the child.

    A wait on the same queue lends the parent's queue slot to the child, but a copy of
    the queue (the child's concurrency key) lends at most as many slots as its ``limit``,
    and the queue as many as its ``total`` (total_concurrency): past that, the child could
    only start by running more jobs than they allow."""
    lending = Attempt.objects.filter(
        active=True,
        ended_at=None,
        queue=child.queue,
        wait=Wait.WAITING,
        wait_queue=child.queue,
    )
    if lending.filter(concurrency_key=child.concurrency_key).count() >= limit:
        slots, which = limit, "max_concurrency"
    elif total is not None and lending.count() >= total:
        slots, which = total, "total_concurrency"
    else:
        return
    raise RecursiveWaitDeadlock(
        f"Job {parent.job_id} waits on job {child.pk} in its own queue "
        f"{child.queue!r}, whose {slots} slot(s) are all lent to jobs already waiting "
        f"on subtasks (chain: {' <- '.join(chain)}): raise the queue's {which} "
        "or run the subtask on another queue.",
        queue=child.queue,
        chain=chain,
    )


@job_call
def workers_exhausted(parent: Attempt, child_id: str) -> bool:
    """Return whether every live worker is blocked in subtask waits, the child not started.

    Every slot of every live worker is then blocked waiting on a subtask and ours has not
    started (each worker process counted with this process's ``SLOTS``)."""
    started = Attempt.objects.filter(job_id=child_id, active=True).exclude(started_at=None)
    if started.exists():
        return False
    dead_after = timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER)
    live = set(
        WorkerHeartbeat.objects.filter(seen_at__gte=clock.now() - dead_after).values_list(
            "id", flat=True
        )
    )
    waiting = Counter(
        Attempt.objects.filter(active=True, ended_at=None, worker__in=live)
        .exclude(wait=Wait.NONE)
        .values_list("worker", flat=True)
    )
    slots = ratequeue_settings().SLOTS
    return bool(live) and all(waiting[worker] >= slots for worker in live)


@contextmanager
def slots_released(parent: Attempt, child: Job) -> Iterator[None]:
    """Give the parent's slots back for the duration of the block, then take them back."""
    lend_slots(parent, child)
    try:
        yield
    except RecursiveWaitDeadlock:
        # Every worker is blocked, so no loop pass could run to grant the slots back: take
        # them back directly. Whatever the loop started meanwhile cannot run before one of
        # these workers is free, so no more jobs run at once than the limits allow.
        take_slots_now(parent)
        raise
    except BaseException:
        _take_slots_back(parent)
        raise
    _take_slots_back(parent)


@asynccontextmanager
async def aslots_released(parent: Attempt, child: Job) -> AsyncIterator[None]:
    """Give the parent's slots back for the block, as :func:`slots_released`, in async code.

    For an ``async def`` job: its queries run in a thread and its pauses are the event
    loop's, so the loop's other jobs go on meanwhile."""
    await sync_to_async(lend_slots)(parent, child)
    try:
        yield
    except RecursiveWaitDeadlock:
        await sync_to_async(take_slots_now)(parent)
        raise
    except BaseException:
        await _atake_slots_back(parent)
        raise
    await _atake_slots_back(parent)


@job_call
def lend_slots(parent: Attempt, child: Job) -> None:
    """Mark the parent waiting on ``child``: the loop lends its slots meanwhile."""
    Attempt.objects.filter(pk=parent.pk).wait_on(child.queue)
    signal(LOOP)


@job_call
def take_slots_now(parent: Attempt) -> None:
    """Take the parent's slots back without the loop (see :func:`slots_released`)."""
    Attempt.objects.filter(pk=parent.pk).resume()


@job_call
def ask_slots_back(parent: Attempt) -> None:
    """Ask the loop for the parent's slots back."""
    Attempt.objects.filter(pk=parent.pk).ask_to_resume()
    signal(LOOP)


@job_call
def slots_granted(parent: Attempt) -> bool:
    """Return whether the loop gave the parent its slots back (or it ended meanwhile)."""
    return not Attempt.objects.filter(pk=parent.pk, wait=Wait.RESUMING, active=True).exists()


def _take_slots_back(parent: Attempt) -> None:
    """Ask the loop for the slots back and wait until it grants them."""
    ask_slots_back(parent)
    pause = 0.005
    while not slots_granted(parent):
        time.sleep(pause)
        pause = min(pause * 1.5, 0.2)


async def _atake_slots_back(parent: Attempt) -> None:
    """Ask the loop for the slots back and wait, on the event loop, until it grants them."""
    await sync_to_async(ask_slots_back)(parent)
    pause = 0.005
    while not await sync_to_async(slots_granted)(parent):
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, 0.2)

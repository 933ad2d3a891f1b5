"""How the loop is woken: its state's lease, the kicks of producers, the django-q2 hand-off.

It owns the reading of ``LoopState`` (:func:`ensure_loop_state`), the conditional kick
that starts a pass (:func:`wake_loop`), and handing a pass or a batch to django-q2 by
dotted path (:func:`enqueue_task`), so that nothing here imports the loop or the runner.
The protocol and its invariants are told in docs/concepts.md ("Kicks and the watchdog").
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import clock
from ..conf import ratequeue_settings
from .bounds import LATEST
from .models import LoopState, LoopStatus, queue_connection, queue_db

# The django-q2 tasks, by path: a pass of the loop (and the batch it keeps), and a batch.
LOOP_TASK = "django_ratequeue.queue.runner.main_loop"
RUNNER_TASK = "django_ratequeue.queue.runner.run_batch"


def lease_end(now: datetime) -> datetime:
    """When a lease taken or renewed at ``now`` lapses."""
    return now + timedelta(seconds=ratequeue_settings().LOOP_LEASE)


def segment_ceiling(moment: datetime) -> datetime:
    """``moment`` rounded up to a SEGMENT boundary: work due close together, one pass."""
    segment = ratequeue_settings().SEGMENT
    moment = min(moment, LATEST)  # a start at 23:59:59 on 31/12/9999 rounds to year 10000
    if segment <= 0:
        return moment
    stamp = math.ceil(moment.timestamp() / segment) * segment
    return datetime.fromtimestamp(stamp, tz=moment.tzinfo)


def enqueue_task(func: str, *args: Any) -> None:
    """Hand a task to django-q2: inside our transaction with the ORM broker (so it exists
    exactly when our rows do), after commit with other brokers."""
    from django_q.conf import Conf
    from django_q.tasks import async_task

    # No django-q2 timeout: jobs enforce their own, a pass bounds itself (and may run a batch
    # inline), and a stuck task is superseded through the lease and the claims anyway.
    options: dict[str, Any] = {"save": False, "timeout": -1}
    if Conf.ORM:
        async_task(func, *args, q_options=options)
    else:
        transaction.on_commit(lambda: async_task(func, *args, q_options=options), using=queue_db())


def ensure_loop_state() -> tuple[int, str, datetime | None, datetime | None]:
    """(generation, state, next_wake_at, lease_expires_at), creating the singleton if needed.

    Every producer makes this read after commit, so it is plain SQL: a point read by
    primary key, without the ORM's per-query overhead.
    """
    connection = queue_connection()
    table = connection.ops.quote_name(LoopState._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT generation, state, next_wake_at, lease_expires_at FROM {table} WHERE id = %s",
            [LoopState.SINGLETON],
        )
        row = cursor.fetchone()
    if row is None:
        LoopState.objects.bulk_create([LoopState(pk=LoopState.SINGLETON)], ignore_conflicts=True)
        return 0, LoopStatus.IDLE, None, None
    generation, state, next_wake_at, lease_expires_at = row
    return generation, state, _aware(next_wake_at), _aware(lease_expires_at)


def _aware(value: datetime | str | None) -> datetime | None:
    """A raw datetime column as an aware datetime (SQLite returns naive UTC text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def start_pass(generation: int, **seen: Any) -> bool:
    """Mark the loop running and enqueue a pass, if the row is still as seen (one wins)."""
    now = clock.now()
    with transaction.atomic(using=queue_db()):
        won = LoopState.objects.mark_running(generation, lease_end(now), now, **seen)
        if won:
            enqueue_task(LOOP_TASK, generation)
    return won


def wake_loop(due_at: datetime | None = None) -> str:
    """Kick the loop if it rests. ``due_at`` is when new work can start (enqueue); None
    means work that frees or changes slots (completion, cancel). Returns the state seen."""
    generation, state, next_wake_at, _lease_end = ensure_loop_state()
    if state == LoopStatus.RUNNING:
        return state
    if due_at is not None and state == LoopStatus.SATURATED:
        return state
    if (
        due_at is not None
        and state == LoopStatus.SCHEDULED
        and next_wake_at is not None
        and due_at >= next_wake_at
    ):
        return state
    start_pass(generation, state=state)
    return state

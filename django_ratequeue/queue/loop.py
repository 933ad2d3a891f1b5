"""The main loop: the only code that moves jobs between statuses.

Tables and who writes them
--------------------------
- ``Job``: INSERTed by producers (``enqueue``) as WAITING, or SCHEDULED when ``start_at`` is
  in the future. From then on only the loop updates a job's status.
- ``CancelRequest``: INSERTed by producers (``Handle.cancel``, ``cancel_all``); the loop reads
  them oldest first and deletes them once applied.
- ``Attempt``: created by the loop when it starts a job (``active`` = holds a slot); the
  runner claims it (``started_at``) and ends it (``ended_at`` + outcome) with conditional
  UPDATEs; the loop finalises it (``active`` = false) and applies the outcome to the job.
- ``LoopState``: the singleton below. ``WorkerHeartbeat``: one row per worker process.

So producers never update a row the loop owns and never wait for it: an enqueue is one
INSERT. The loop reads only bounded, indexed sets: the active attempts (at most
``MAX_CONCURRENCY``), the oldest cancel requests, the jobs that came due (index
``status, start_at``), and per queue the head of its WAITING jobs (index ``status, queue,
-priority, created_at``). History is never scanned on the hot path, so a backlog of a million
waiting jobs costs the same per dispatch as an empty queue.

Job statuses
------------
::

    enqueue ──> SCHEDULED ──(start_at reached)──┐
    enqueue ──> WAITING <───────────────────────┘<──(back-off over)── RETRYING
                WAITING ──(slot free)──> RUNNING
                RUNNING ──(success)──> COMPLETE
                RUNNING ──(failure, retries left)──> RETRYING
                RUNNING ──(NonRetryableError / no retries left)──> FAILED
    SCHEDULED / WAITING / RETRYING ──(cancel)──> CANCELED            (at once)
                RUNNING ──(cancel)──> CANCELED when its attempt ends  (no more retries)

A RUNNING job's attempt ends by the runner reporting it, or by recovery: its worker's
heartbeat is older than ``WORKER_DEAD_AFTER`` (failed, retried by policy; an attempt that had
not started yet is simply put back to WAITING), it overran ``timeout`` (failed), or no worker
claimed it within ``WORKER_DEAD_AFTER`` of its dispatch while a live worker was idle (put back
to WAITING). All times are the database server's (:mod:`django_ratequeue.clock`). Every
transition to a final status creates the ``on_complete`` callback job in the same
transaction, so it is called exactly once.

Loop states (``LoopState.state``)
---------------------------------
::

    idle ──(enqueue, cancel)──> running
    running ──(nothing to start now; future work or jobs running)──> scheduled
    running ──(MAX_CONCURRENCY reached)──> saturated
    running ──(nothing left at all)──> idle
    scheduled ──(enqueue due sooner, cancel, completion, next_wake_at passed)──> running
    saturated ──(cancel, completion, next_wake_at passed)──> running

Invariants
----------
- One loop at a time: a pass starts with ``UPDATE ... SET generation = g + 1 WHERE
  generation = g``; only one contender can win it. Every step of the pass is one transaction
  that begins by renewing the lease with ``WHERE generation = mine`` (which also locks the
  row), so a pass that lost its generation stops before doing anything.
- Kicks: a producer, after its commit, reads the state (a point read). Only if the loop rests
  (idle; scheduled later than the new work; saturated for completions and cancels) does it
  try ``UPDATE ... SET state = running WHERE generation = g AND state = <seen>`` and, if it
  won, enqueue the pass. No wake-up is lost: a pass that found no work writes its resting
  state and then takes one more step, which sees everything committed before a producer
  could have read "running".
- A pass works in steps while there is work, for at most half a lease, then hands over to a
  fresh django-q2 task so that it never reaches django-q2's timeout.
- The watchdog (a thread in each worker process, see :mod:`.watchdog`) wakes a resting loop
  whose ``next_wake_at`` passed, and runs a pass itself when the loop is running but its
  lease was not renewed for two watchdog intervals: the pass died, or its django-q2 task
  waits behind busy workers. So the loop makes progress (cancels, completions, recovery)
  even while every worker runs a slow job. Such a pass hands all its batches to the broker,
  since running jobs in the watchdog thread would hold up its heartbeats, and returns after
  ``HEARTBEAT_INTERVAL``; the stale task finds the generation moved and returns.
- Limits: a job starts only while fewer than ``MAX_CONCURRENCY`` attempts are active, fewer
  than its queue's limit in its queue, and fewer than the queue's ``key_concurrency`` (default
  1) with its ``concurrency_key``. Candidates are taken by priority, then in turns over
  the concurrency keys with work ready (round robin from the key served last, kept in
  ``LoopState.key_cursors``), then arrival: among jobs of equal priority, a key with a big
  backlog gets one start per round like any other (:mod:`.keys`). Queues take turns too,
  from the one after the queue served last (``LoopState.queue_cursor``); a step looks at
  ``QUEUES_PER_STEP`` queues with waiting jobs from there, so none starves however many
  have work. Queue limits changed at runtime (:mod:`.control`) are read at every step.
- Dispatch: the started attempts are dealt round-robin into batches (one per live worker,
  at most ``DISPATCH_BATCH_SIZE`` attempts each) carrying attempt ids only. The pass keeps
  the first batch and runs it itself once it rests (its worker is free then: one broker
  round trip less from enqueue to start); the others become django-q2 tasks, written in the
  loop's own transaction with the ORM broker so that they exist exactly when the attempts
  do. A runner claims attempts in chunks that grow while jobs are quick (one conditional
  UPDATE per chunk, a short one per attempt as it starts, one ``UPDATE ... FROM unnest``
  for the outcomes), and when its batch is done it takes over attempts nobody claimed
  yet, so a slow job does not hold up its batch.
  A redelivered task finds its attempts claimed and runs nothing twice. A runner about to
  go idle whose batch freed slots of a resting loop runs the loop's next pass itself (the
  pass after ``generation``, won like any other) and then that pass's batch, for at most
  half a lease from its start: no broker round trip between a completion and the next
  start.
- Subtask waits (:mod:`.subtasks`): an attempt waiting on another job's result does not
  count towards ``MAX_CONCURRENCY``, nor towards its queue when the awaited job is in the
  same queue; when it asks to resume, the loop gives it its slots back before it starts
  anything new.
- Rate limits: a queue with ``rate_limit`` reserves each job's ``cost`` from that limit
  (``reserve=True``, in the step's transaction) when the job could otherwise start, and
  starts it at the time the reservation gives, never before; meanwhile the job holds its
  queue and key slots (``tokens_reserved``, its ``start_at`` is the reserved time). Nothing
  is refused for lack of tokens and big jobs are not starved by small ones; a refusal
  (``max_reserved`` reached) parks the queue until ``retry_at``.
- ``SEGMENT``: the loop's time slice. Resting wake-ups are rounded up to a segment boundary
  so that work falling due close together is handled by one pass, and runners report
  completions of quick jobs at most once per segment.

Segments and cursors
--------------------
The reference design has producers append to future time segments that the loop reads by
cursor, to avoid write conflicts and scans over deleted rows. Here the database gives the
same guarantees more directly: producers only INSERT (no conflict with the loop under
PostgreSQL's MVCC; SQLite serialises writers anyway), and the loop reads the head of indexes
that contain exactly the unprocessed work (WAITING jobs per queue, due deferred jobs, active
attempts, pending cancel requests, which are deleted once applied). There is no processed
prefix to skip, so there is no cursor to keep and no commit-order gap to patch up later.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar

from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import clock
from ..conf import QueueConfig, ratequeue_settings
from ..exceptions import AttemptTimedOut, WorkerLost, class_path
from .bounds import LATEST, later
from .bulk import update_rows
from .keys import keys_in_turn, next_jobs
from .models import (
    DEFERRED_STATUSES,
    FINAL_STATUSES,
    Attempt,
    CancelRequest,
    Job,
    LoopState,
    LoopStatus,
    Outcome,
    QueueSetting,
    Status,
    Wait,
    WorkerHeartbeat,
    new_job_id,
)
from .retry import Retry

logger = logging.getLogger("django_ratequeue.queue")

LOOP_TASK = "django_ratequeue.queue.loop.main_loop"
RUNNER_TASK = "django_ratequeue.queue.runner.run_batch"
# Rows one step handles at most of each kind, to keep its transaction short.
STEP_LIMIT = 1000
CANCELS_PER_STEP = 100
# What finishing an attempt writes to its job, and what it reads to decide.
JOB_OUTCOME_FIELDS = [
    "status",
    "attempts",
    "result",
    "error",
    "traceback",
    "exception_class_path",
    "start_at",
    "finished_at",
]
FINISH_FIELDS = [
    *JOB_OUTCOME_FIELDS,
    "retry",
    "cancel_requested",
    "on_complete",
    "context",
    "owner",
]
# Concurrency keys looked at per queue beyond its free slots, to get past busy keys.
KEY_LOOKAHEAD = 100
# Queues with waiting work looked at per step, in turns from LoopState.queue_cursor.
QUEUES_PER_STEP = 1000
# What a rate-gated queue's reservation says about a job (see Loop.reserve_tokens).
TokenGate = Literal["now", "later", "parked", "unfit"]
T = TypeVar("T")


def _now() -> datetime:
    return clock.now()


def _lease() -> timedelta:
    return timedelta(seconds=ratequeue_settings().LOOP_LEASE)


def _segment_ceiling(moment: datetime) -> datetime:
    segment = ratequeue_settings().SEGMENT
    moment = min(moment, LATEST)  # a start at 23:59:59 on 31/12/9999 rounds to year 10000
    if segment <= 0:
        return moment
    stamp = math.ceil(moment.timestamp() / segment) * segment
    return datetime.fromtimestamp(stamp, tz=moment.tzinfo)


def _enqueue_task(func: str, *args: Any) -> None:
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
        transaction.on_commit(lambda: async_task(func, *args, q_options=options))


def ensure_loop_state() -> tuple[int, str, datetime | None, datetime | None]:
    """(generation, state, next_wake_at, lease_expires_at), creating the singleton if needed.

    Every producer makes this read after commit, so it is plain SQL: a point read by
    primary key, without the ORM's per-query overhead.
    """
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
    generation, state, next_wake_at, lease_end = row
    return generation, state, _aware(next_wake_at), _aware(lease_end)


def _aware(value: datetime | str | None) -> datetime | None:
    """A raw datetime column as an aware datetime (SQLite returns naive UTC text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def _start_pass(generation: int, seen: str, **conditions: Any) -> bool:
    """Move the loop from ``seen`` to running and enqueue a pass, if nobody else did first."""
    now = _now()
    with transaction.atomic():
        won = LoopState.objects.filter(
            pk=LoopState.SINGLETON, generation=generation, state=seen, **conditions
        ).update(state=LoopStatus.RUNNING, lease_expires_at=now + _lease(), updated_at=now)
        if won:
            _enqueue_task(LOOP_TASK, generation)
    return bool(won)


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
    _start_pass(generation, state)
    return state


def watch_loop() -> datetime | None:
    """The watchdog's check: run a pass that does not progress (its process died, or its
    task waits behind busy workers) right here; wake a resting loop whose time came.

    Returns when a resting loop wants waking next, so that the watchdog can sleep until
    then rather than a whole interval: scheduled starts and reserved rate-limit times are
    then met within a broker hand-off, not within a watchdog interval."""
    generation, state, next_wake_at, lease_end = ensure_loop_state()
    now = _now()
    if state == LoopStatus.RUNNING:
        grace = timedelta(seconds=2 * ratequeue_settings().WATCHDOG_INTERVAL)
        if lease_end is None or lease_end - _lease() < now - grace:
            if lease_end is None or lease_end < now:
                logger.warning("Main loop lease lapsed (generation %s); taking over", generation)
            main_loop(generation, in_watchdog=True)
    elif state != LoopStatus.IDLE and next_wake_at is not None:
        if next_wake_at <= now:
            _start_pass(generation, state)
        else:
            return next_wake_at
    return None


def main_loop(generation: int, in_watchdog: bool = False) -> bool:
    """One pass of the main loop (a django-q2 task, or the watchdog's when that task does
    not start). Returns False at once if another pass already took over from
    ``generation``."""
    loop = _take_pass(generation)
    if loop is not None:
        loop.run(in_watchdog)
    return loop is not None


def take_resting_pass() -> Loop | None:
    """The loop's next pass, for this process to run, if the loop rests. A runner whose
    batch freed slots and that is about to go idle runs that pass itself rather than kick
    one through the broker: a broker round trip saved per pass. None if a pass is running
    (it sees the freed slots at its next step) or another kick won."""
    generation, state, _next_wake_at, _lease_end = ensure_loop_state()
    if state == LoopStatus.RUNNING:
        return None
    return _take_pass(generation, state=state)


def _take_pass(generation: int, **conditions: Any) -> Loop | None:
    """The pass after ``generation``, if this contender wins it (only one can)."""
    now = _now()
    won = LoopState.objects.filter(
        pk=LoopState.SINGLETON, generation=generation, **conditions
    ).update(
        generation=generation + 1,
        state=LoopStatus.RUNNING,
        lease_expires_at=now + _lease(),
        updated_at=now,
    )
    return Loop(generation + 1) if won else None


@dataclass(frozen=True)
class QueueLimits:
    """The limits of one queue: ``RATEQUEUE["QUEUES"]`` with the runtime overrides of
    :mod:`.control` on top (None: not configured). ``source`` says where
    ``max_concurrency`` comes from: "settings", "runtime" or "" (not configured)."""

    max_concurrency: int | None
    key_concurrency: int = 1
    rate_limit: str | None = None
    source: str = ""

    @classmethod
    def of(cls, name: str, overrides: dict[str, QueueSetting] | None = None) -> QueueLimits:
        """``overrides``: :func:`queue_overrides` read once by the caller; read here if None."""
        settings = ratequeue_settings()
        configured_queue = settings.QUEUES.get(name)
        config = configured_queue or QueueConfig()
        if overrides is None:
            overrides = {s.name: s for s in QueueSetting.objects.filter(name=name)}
        override = overrides.get(name) or QueueSetting(name=name)
        limit = override.max_concurrency
        if limit is None and configured_queue is not None:
            limit = configured_queue.max_concurrency
        elif limit is None and name == "default":
            limit = settings.MAX_CONCURRENCY
        paused = override.paused
        if paused is None:
            paused = config.paused
        # Where the effective value comes from: the pause if paused, else the limit.
        changed_at_runtime = override.paused if paused else override.max_concurrency
        configured = limit is not None or paused
        return cls(
            max_concurrency=0 if paused else limit,
            key_concurrency=config.key_concurrency,
            rate_limit=config.rate_limit,
            source="runtime"
            if changed_at_runtime is not None
            else "settings"
            if configured
            else "",
        )

    def limit_for(self, job_max_concurrency: int | None) -> int:
        if self.max_concurrency is not None:
            return self.max_concurrency
        return 1 if job_max_concurrency is None else job_max_concurrency


def queue_overrides() -> dict[str, QueueSetting]:
    """Every runtime override, by queue name: one query on a table of a few rows."""
    return {setting.name: setting for setting in QueueSetting.objects.all()}


class Loop:
    """The work of one pass, in steps; ``generation`` is the one this pass owns."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.settings = ratequeue_settings()
        self._last_recovery = 0.0
        # Queues whose rate limit refused a start, and when to try again.
        self.rate_limited_until: dict[str, datetime] = {}
        # Per queue, the concurrency key served last (LoopState.key_cursors, read once),
        # and the queue served last (LoopState.queue_cursor).
        self.key_cursors: dict[str, str] | None = None
        self.queue_cursor = ""
        # When the jobs whose tokens are reserved for later may start (set by start_ready).
        self.reserved_starts: list[datetime] = []
        self.inline_batch: list[int] = []
        # Set by a step: it hit a per-step limit (more_work), or left the loop resting, and
        # when the resting loop wants waking.
        self.more_work = False
        self.rested = False
        self.rest_state: str = LoopStatus.RUNNING
        self.next_wake: datetime | None = None

    def run(self, in_watchdog: bool = False) -> None:
        if in_watchdog:
            # Short, and no job runs in the watchdog thread: its heartbeats must go on.
            self.work(self.settings.HEARTBEAT_INTERVAL, linger=False)
            if self.inline_batch:
                _enqueue_task(RUNNER_TASK, self.inline_batch)
            return
        until = time.monotonic() + self.settings.LOOP_LEASE / 2
        self.work(until - time.monotonic())
        if self.inline_batch:
            # This worker is free now: run one batch here rather than through the broker,
            # which saves a broker round trip on the way from enqueue to start.
            from .runner import run_batch

            run_batch(self.inline_batch, until=until)

    def work(self, seconds: float, linger: bool = True) -> None:
        """Step while there is work, for at most ``seconds``. With ``linger``, a pass whose
        loop would rest until sooner than the watchdog's next look waits for that moment
        itself: scheduled starts, back-offs and reserved rate-limit times are then met on
        time instead of up to a watchdog interval late (which bunches rate-gated starts)."""
        deadline = time.monotonic() + seconds
        quiet_steps = 0
        rested_at = None
        while True:
            did_work = self.step()
            if did_work is None:
                return
            # A step that left the loop resting is followed by exactly one more, which sees
            # whatever a producer committed while reading "running" (no lost wake-up).
            quiet_steps = quiet_steps + 1 if self.rested else 0
            if quiet_steps >= 2:
                rested_at = rested_at or time.monotonic()
                watch = self.watch_for_skipped_kicks(rested_at) if linger else None
                if watch is not None and time.monotonic() + watch < deadline:
                    time.sleep(watch)
                    continue
                pause = self.pause_before_wake() if linger else None
                if pause is None:
                    return
                if time.monotonic() + pause > deadline:
                    self.hand_over()  # a fresh task waits for the wake, not the watchdog
                    return
                # Resting, so a producer's kick or the watchdog may start another pass
                # meanwhile; then this one loses its generation at its next step and stops.
                time.sleep(pause)
                quiet_steps = 0
                rested_at = None
                continue
            if quiet_steps == 0:
                rested_at = None
            if time.monotonic() > deadline:
                self.hand_over()
                return

    def watch_for_skipped_kicks(self, rested_at: float) -> float | None:
        """How long to sleep before looking for new work again, while a producer that saw
        this pass running may still commit a job without kicking (it skips its read of
        the loop's state for a SEGMENT, see :func:`.enqueue.wake_after_enqueue`).

        Only when the loop rests idle: nothing would look again before the watchdog's
        check for forgotten work. Resting otherwise, the next completion or wake-up does;
        and a pass with a batch to run runs it first, its completions starting the next
        pass (:func:`.runner.run_batch`). None once a SEGMENT has passed since the rest."""
        if self.rest_state != LoopStatus.IDLE or self.inline_batch:
            return None
        segment = self.settings.SEGMENT
        left = rested_at + segment - time.monotonic()
        return min(left, segment / 4) if left > 0 else None

    def pause_before_wake(self) -> float | None:
        """Seconds until the resting loop's next wake, if the watchdog would look later."""
        if self.next_wake is None:
            return None
        pause = (self.next_wake - _now()).total_seconds()
        return max(pause, 0.0) if pause <= self.settings.WATCHDOG_INTERVAL else None

    def hand_over(self) -> None:
        """Continue in a fresh django-q2 task (which bumps the generation)."""
        now = _now()
        with transaction.atomic():
            if LoopState.objects.filter(pk=LoopState.SINGLETON, generation=self.generation).update(
                state=LoopStatus.RUNNING, lease_expires_at=now + _lease(), updated_at=now
            ):
                _enqueue_task(LOOP_TASK, self.generation)

    def step(self) -> bool | None:
        """One transaction of loop work; None if this pass lost its generation."""
        now = _now()
        with transaction.atomic():
            if not LoopState.objects.filter(
                pk=LoopState.SINGLETON, generation=self.generation
            ).update(lease_expires_at=now + _lease(), updated_at=now):
                return None
            self.more_work = False
            did_work = self.recover(now)
            # Cancels before completions: a job canceled before the loop took in its
            # attempt's end ends CANCELED, whichever of the two reached the database first.
            did_work |= self.apply_cancels(now)
            active = list(
                Attempt.objects.filter(active=True).only(
                    "job", "queue", "concurrency_key", "ended_at", "wait", "wait_queue"
                )
            )
            did_work |= self.finish([a.pk for a in active if a.ended_at is not None], now)
            running = [a for a in active if a.ended_at is None]
            did_work |= self.grant_resumes(running)
            did_work |= self.promote_due(now)
            started, waiting_left = self.start_ready(running, now)
            did_work |= bool(started)
            running.extend(started)
            # Rest as soon as nothing is left to do right now, even after doing some work.
            self.rested = not (self.more_work or (started and waiting_left))
            state: str = LoopStatus.RUNNING
            wake: datetime | None = None
            if self.rested:
                state, wake = self.resting_state(running, waiting_left, now)
            self.rest_state, self.next_wake = state, wake
            LoopState.objects.filter(pk=LoopState.SINGLETON).update(state=state, next_wake_at=wake)
        if not did_work:
            from .retention import prune_in_background

            prune_in_background()
        return did_work

    # -- completions ---------------------------------------------------------------------

    def finish(self, ended_ids: list[int], now: datetime) -> bool:
        """Apply the outcome of attempts that ended to their jobs."""
        if not ended_ids:
            return False
        self.more_work |= len(ended_ids) > STEP_LIMIT
        ended = list(Attempt.objects.filter(pk__in=ended_ids[:STEP_LIMIT]))
        jobs = Job.objects.only(*FINISH_FIELDS).in_bulk([a.job_id for a in ended])
        changed: list[Job] = []
        finals: list[Job] = []
        released: list[int] = []
        for attempt in ended:
            job = jobs.get(attempt.job_id)
            if job is None or job.status != Status.RUNNING:
                continue
            if attempt.started_at is None and job.cancel_requested:
                # Canceled before it started: it stays in the job's timeline as it ended.
                job.status = Status.CANCELED
            elif attempt.started_at is None:
                # Its worker died before starting it: not a try; the job waits again.
                released.append(attempt.pk)
                job.status = Status.WAITING
                job.attempts -= 1
            elif not isolated(job, now, partial(settle, job, attempt, now), False):
                continue
            if job.status in FINAL_STATUSES:
                job.finished_at = now
                finals.append(job)
            changed.append(job)
        Attempt.objects.filter(pk__in=[a.pk for a in ended]).update(active=False)
        if released:
            Attempt.objects.filter(pk__in=released).delete()
        update_rows(Job, changed, JOB_OUTCOME_FIELDS)
        create_callbacks(finals, now)
        return True

    # -- recovery ------------------------------------------------------------------------

    def recover(self, now: datetime) -> bool:
        """End attempts whose worker died, that overran their timeout, or that no worker
        claimed within ``WORKER_DEAD_AFTER`` of their dispatch although a live worker runs
        none of our jobs (the pass holding their batch died, or the broker lost its task;
        while every worker is busy, a task simply waits in the broker). An attempt that
        never started is not a try: :meth:`finish` puts its job back to WAITING."""
        interval = self.settings.WATCHDOG_INTERVAL
        if time.monotonic() - self._last_recovery < interval:
            return False
        self._last_recovery = time.monotonic()
        candidates = list(
            Attempt.objects.filter(active=True, ended_at=None).only(
                "job", "worker", "started_at", "timeout", "dispatched_at"
            )
        )
        if not candidates:
            return False
        dead_after = timedelta(seconds=self.settings.WORKER_DEAD_AFTER)
        alive = set(
            WorkerHeartbeat.objects.filter(seen_at__gte=now - dead_after).values_list(
                "id", flat=True
            )
        )
        idle = alive - {a.worker for a in candidates if a.started_at is not None}
        recovered = False
        for attempt in candidates:
            outcome: str
            error_class: type[BaseException] | None = None
            if not attempt.worker:
                if not idle or attempt.dispatched_at + dead_after >= now:
                    continue
                outcome, error = "", "No worker claimed this attempt; its job waits again."
            elif attempt.started_at is None and attempt.worker not in alive:
                outcome, error = "", "Its worker died before it started; its job waits again."
            elif attempt.worker not in alive:
                outcome, error = Outcome.WORKER_LOST, "The worker running this attempt died."
                error_class = WorkerLost
            elif (
                attempt.started_at is not None
                and attempt.timeout is not None
                and later(attempt.started_at, attempt.timeout + dead_after.total_seconds()) < now
            ):
                outcome, error_class = Outcome.TIMED_OUT, AttemptTimedOut
                error = f"The attempt overran its timeout of {attempt.timeout:g} seconds."
            else:
                continue
            # Only if nothing moved since we looked: the runner's claim and report use the
            # same conditions, so exactly one side wins.
            if Attempt.objects.filter(
                pk=attempt.pk, ended_at=None, started_at=attempt.started_at, worker=attempt.worker
            ).update(
                ended_at=now,
                outcome=outcome,
                error=error,
                exception_class_path=class_path(error_class) if error_class else "",
            ):
                recovered = True
                logger.warning(
                    "Recovered attempt %s of job %r: %s",
                    attempt.pk,
                    attempt.job_id,
                    outcome or "never started",
                )
        return recovered

    # -- cancellation --------------------------------------------------------------------

    def apply_cancels(self, now: datetime) -> bool:
        requests = list(CancelRequest.objects.order_by("pk")[:CANCELS_PER_STEP])
        if not requests:
            return False
        done: list[int] = []
        budget = STEP_LIMIT
        for request in requests:
            scope = Q(created_at__lte=request.created_at)
            if request.job_id:
                scope = Q(pk=request.job_id)
            elif request.queue:
                scope &= Q(queue=request.queue)
            pending = list(
                Job.objects.filter(scope, status__in=[Status.WAITING, *DEFERRED_STATUSES]).only(
                    "on_complete", "context", "result", "owner"
                )[:budget]
            )
            for job in pending:
                job.status, job.finished_at = Status.CANCELED, now
            Job.objects.filter(pk__in=[j.pk for j in pending]).update(
                status=Status.CANCELED, finished_at=now
            )
            create_callbacks(pending, now)
            running = Job.objects.filter(scope, status=Status.RUNNING, cancel_requested=False)
            # An attempt not started yet never will be: end it now (a runner's claim needs
            # started_at still empty, so exactly one side wins).
            Attempt.objects.filter(
                job__in=running, active=True, started_at=None, ended_at=None
            ).update(ended_at=now, error="Canceled before it started.")
            running.update(cancel_requested=True)
            budget -= len(pending)
            if budget <= 0:
                break
            done.append(request.pk)
        CancelRequest.objects.filter(pk__in=done).delete()
        self.more_work |= len(done) < len(requests) or len(requests) == CANCELS_PER_STEP
        return True

    # -- scheduled starts and retries ----------------------------------------------------

    def promote_due(self, now: datetime) -> bool:
        due = list(
            Job.objects.filter(status__in=DEFERRED_STATUSES, start_at__lte=now).values_list(
                "pk", flat=True
            )[:STEP_LIMIT]
        )
        if due:
            Job.objects.filter(pk__in=due, status__in=DEFERRED_STATUSES).update(
                status=Status.WAITING
            )
        self.more_work |= len(due) == STEP_LIMIT
        return bool(due)

    # -- subtask waits ------------------------------------------------------------------

    def grant_resumes(self, running: list[Attempt]) -> bool:
        """Give slots back to attempts that waited on a subtask, before anything new starts."""
        resuming = [a for a in running if a.wait == Wait.RESUMING]
        if not resuming:
            return False
        own_limits = dict(
            Job.objects.filter(pk__in=[a.job_id for a in resuming]).values_list(
                "pk", "max_concurrency"
            )
        )
        environment = sum(map(holds_environment_slot, running))
        per_queue = Counter(a.queue for a in running if holds_queue_slot(a))
        granted = []
        for attempt in resuming:
            needs_queue_slot = not holds_queue_slot(attempt)
            limit = QueueLimits.of(attempt.queue).limit_for(own_limits.get(attempt.job_id))
            if environment >= self.settings.MAX_CONCURRENCY or (
                needs_queue_slot and per_queue[attempt.queue] >= limit
            ):
                continue
            environment += 1
            per_queue[attempt.queue] += needs_queue_slot
            attempt.wait, attempt.wait_queue = Wait.NONE, ""
            granted.append(attempt.pk)
        Attempt.objects.filter(pk__in=granted, wait=Wait.RESUMING).update(
            wait=Wait.NONE, wait_queue=""
        )
        return bool(granted)

    # -- dispatch ------------------------------------------------------------------------

    def start_ready(self, running: list[Attempt], now: datetime) -> tuple[list[Attempt], bool]:
        """Start what the limits allow; returns (the new attempts, WAITING jobs remain).

        Each queue offers its jobs in rounds over its concurrency keys (see
        :meth:`queue_candidates`); the offers of all queues are taken by priority, then
        round, then the queues' turn (from the one after the queue served last), so a
        higher priority goes first and keys and queues of equal priority take turns.
        """
        self.reserved_starts = []
        if self.key_cursors is None:  # once per pass: only one pass runs at a time
            state = LoopState.objects.filter(pk=LoopState.SINGLETON)
            self.key_cursors, self.queue_cursor = state.values_list(
                "key_cursors", "queue_cursor"
            ).first() or ({}, "")
        queues = waiting_queues(after=self.queue_cursor)
        if not queues:
            return [], False
        env_free = self.settings.MAX_CONCURRENCY - sum(map(holds_environment_slot, running))
        if env_free <= 0:
            return [], True
        per_queue = Counter(a.queue for a in running if holds_queue_slot(a))
        per_key = Counter((a.queue, a.concurrency_key) for a in running if a.concurrency_key)
        overrides = queue_overrides()
        cursors = self.key_cursors or {}
        offers: list[tuple[Job, int, int]] = []
        for turn, name in enumerate(queues):
            limits = QueueLimits.of(name, overrides)
            offers.extend(
                (job, round_, turn)
                for job, round_ in self.queue_candidates(
                    name, limits, cursors.get(name), per_queue, per_key, env_free, now
                )
            )
        offers.sort(key=lambda offer: (-offer[0].priority, offer[1], offer[2]))
        chosen = [job for job, _round, _turn in offers[:env_free]]
        self.remember_turns(chosen, queues)
        if not chosen:
            return [], True
        attempts = Attempt.objects.bulk_create(
            [
                Attempt(
                    job_id=job.pk,
                    number=job.attempts + 1,
                    queue=job.queue,
                    concurrency_key=job.concurrency_key,
                    timeout=job.timeout,
                    dispatched_at=now,
                )
                for job in chosen
            ]
        )
        Job.objects.filter(pk__in=[job.pk for job in chosen]).update(
            status=Status.RUNNING, attempts=F("attempts") + 1, tokens_reserved=False
        )
        for batch in self.batches([a.pk for a in attempts], now):
            if self.inline_batch:
                _enqueue_task(RUNNER_TASK, batch)
            else:
                self.inline_batch = batch
        return attempts, len(offers) > len(chosen) or len(chosen) == env_free or bool(
            self.reserved_starts
        )

    def remember_turns(self, chosen: list[Job], queues: list[str]) -> None:
        """Keep where the next step's turns begin, in one UPDATE when they moved: per queue
        after the key served last, and over the queues after the queue served last (or
        after the last one looked at when none could start anything, so that each queue
        gets its turn however many have work)."""
        cursors = self.key_cursors or {}
        keys = {**cursors, **{job.queue: job.concurrency_key for job in chosen}}
        queue = self.queue_cursor
        if chosen:
            queue = chosen[-1].queue
        elif len(queues) == QUEUES_PER_STEP:
            queue = queues[-1]
        moved: dict[str, Any] = {}
        if keys != cursors:
            moved["key_cursors"] = keys
        if queue != self.queue_cursor:
            moved["queue_cursor"] = queue
        if moved:
            LoopState.objects.filter(pk=LoopState.SINGLETON).update(**moved)
            self.key_cursors, self.queue_cursor = keys, queue

    def queue_candidates(
        self,
        name: str,
        limits: QueueLimits,
        cursor: str | None,
        per_queue: Counter[str],
        per_key: Counter[tuple[str, str]],
        env_free: int,
        now: datetime,
    ) -> list[tuple[Job, int]]:
        """The jobs queue ``name`` can start now, each with its round: the keys with work
        ready are visited in turn from ``cursor`` on, and round n offers each key's n-th
        next job (by priority, then arrival), so every key gets a start before any key
        gets two. Jobs without a key share the key ``""``."""
        if limits.max_concurrency == 0:
            return []
        if name in self.rate_limited_until and self.rate_limited_until[name] > now:
            return []
        ceiling = limits.max_concurrency or self.settings.MAX_QUEUE_CONCURRENCY
        room = min(ceiling - per_queue[name], env_free)
        if room <= 0:
            return []
        keys = keys_in_turn(name, cursor, room + KEY_LOOKAHEAD)
        takes = {
            key: min(room, limits.key_concurrency - per_key[(name, key)] if key else room)
            for key in keys
        }
        turn = {key: position for position, key in enumerate(keys)}
        jobs = next_jobs(name, takes)
        jobs.sort(key=lambda job: (turn[job.concurrency_key], -job.priority, job.created_at))
        taken: Counter[str] = Counter()
        rounds: dict[str, int] = {}
        for job in jobs:
            rounds[job.pk] = taken[job.concurrency_key]
            taken[job.concurrency_key] += 1
        jobs.sort(key=lambda job: (-job.priority, rounds[job.pk], turn[job.concurrency_key]))
        chosen: list[tuple[Job, int]] = []
        for job in jobs:
            if per_queue[name] >= ceiling or len(chosen) >= env_free:
                break
            if per_queue[name] >= limits.limit_for(job.max_concurrency):
                continue
            key = (name, job.concurrency_key)
            if job.concurrency_key and per_key[key] >= limits.key_concurrency:
                continue
            gate: TokenGate = "now"
            if limits.rate_limit:
                gate = isolated(
                    job,
                    now,
                    partial(self.reserve_tokens, name, limits.rate_limit, job, now),
                    "unfit",
                )
                if gate == "parked":
                    break
                if gate == "unfit":
                    continue
            # A job whose tokens are reserved for later holds its slots until then.
            per_queue[name] += 1
            if job.concurrency_key:
                per_key[key] += 1
            if gate == "now":
                chosen.append((job, rounds[job.pk]))
        return chosen

    def reserve_tokens(self, queue: str, limit_name: str, job: Job, now: datetime) -> TokenGate:
        """Reserve a job's ``cost`` from its queue's rate limit once, in this step's
        transaction; "now" when the reservation says it may start at the step's ``now``,
        "later" when not yet. A refusal ("parked": ``max_reserved`` is reached) parks the
        queue until ``retry_at``; a cost the limit can never grant ("unfit": the settings
        changed since the enqueue, which checks it) fails the job."""
        from ..ratelimit.api import rate_limit

        if job.cost == 0:
            return "now"
        if not job.tokens_reserved:
            try:
                decision = rate_limit(limit_name, count=job.cost, reserve=True)
            except ValueError as error:
                fail_job(job, f"Its cost cannot be reserved from {limit_name!r}: {error}", now)
                return "unfit"
            if not decision.ok:
                self.rate_limited_until[queue] = decision.retry_at or now + timedelta(seconds=1)
                return "parked"
            job.tokens_reserved = True
            if decision.retry_at is not None and decision.retry_at > job.start_at:
                job.start_at = decision.retry_at
            Job.objects.filter(pk=job.pk).update(tokens_reserved=True, start_at=job.start_at)
        if job.start_at > now:
            self.reserved_starts.append(job.start_at)
            return "later"
        return "now"

    def batches(self, attempt_ids: list[int], now: datetime) -> Iterable[list[int]]:
        """Deal the attempts round-robin into one batch per live worker (priority order is
        kept within each), at most DISPATCH_BATCH_SIZE each."""
        dead_after = timedelta(seconds=self.settings.WORKER_DEAD_AFTER)
        workers = WorkerHeartbeat.objects.filter(seen_at__gte=now - dead_after).count()
        size = self.settings.DISPATCH_BATCH_SIZE
        count = min(len(attempt_ids), max(workers, 1, math.ceil(len(attempt_ids) / size)))
        return [attempt_ids[i::count] for i in range(count)]

    # -- resting -------------------------------------------------------------------------

    def resting_state(
        self, running: list[Attempt], waiting_left: bool, now: datetime
    ) -> tuple[str, datetime | None]:
        wakes = [
            start
            for status in DEFERRED_STATUSES
            for start in Job.objects.filter(status=status)
            .order_by("start_at")
            .values_list("start_at", flat=True)[:1]
        ]
        wakes.extend(self.rate_limited_until.values())
        wakes.extend(self.reserved_starts)
        if running:
            # Look again for dead workers and overruns even if no completion arrives.
            wakes.append(now + timedelta(seconds=self.settings.WORKER_DEAD_AFTER))
        wake = _segment_ceiling(min(wakes)) if wakes else None
        holding = sum(map(holds_environment_slot, running))
        if waiting_left and holding >= self.settings.MAX_CONCURRENCY:
            return LoopStatus.SATURATED, wake
        if wake is not None or waiting_left:
            return LoopStatus.SCHEDULED, wake
        return LoopStatus.IDLE, None


def settle(job: Job, attempt: Attempt, now: datetime) -> bool:
    """Apply the outcome of the attempt that ran to its job (not saved yet); True."""
    if attempt.outcome == Outcome.SUCCEEDED:
        job.status = Status.CANCELED if job.cancel_requested else Status.COMPLETE
        job.result = attempt.result
        job.error = job.traceback = job.exception_class_path = ""
    else:
        job.error, job.traceback = attempt.error, attempt.traceback
        job.exception_class_path = attempt.exception_class_path
        policy = Retry(**job.retry)
        if job.cancel_requested:
            job.status = Status.CANCELED
        elif attempt.outcome == Outcome.NON_RETRYABLE or job.attempts > policy.retry_count:
            job.status = Status.FAILED
        else:
            job.status = Status.RETRYING
            job.start_at = later(now, policy.delay(job.attempts))
    return True


def isolated(job: Job, now: datetime, work: Callable[[], T], fallback: T) -> T:
    """Do the loop's ``work`` on one job; should it raise (a row changed behind the app's
    back, a setting removed while the job waited...), fail that job with the error, log
    it, and return ``fallback``: the step goes on for every other job.

    The one place where per-job work is guarded. Only Python errors are: a database error
    aborts the step's transaction, which the next step (or pass) does again."""
    try:
        return work()
    except DatabaseError:
        raise
    except Exception as error:
        logger.exception("Main loop: job %r could not be processed; failing it", job.pk)
        fail_job(job, f"The main loop could not process this job: {describe(error)}", now)
        return fallback


def describe(error: BaseException) -> str:
    """``Type: message`` of an exception, as errors are shown on jobs."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def fail_job(job: Job, error: str, now: datetime) -> None:
    """Fail a job the loop cannot go on with (a WAITING job that could never start, or a
    row it cannot process), with its ``on_complete`` call. The job raised nothing itself:
    no traceback, no exception class."""
    job.status, job.error, job.finished_at = Status.FAILED, error, now
    job.traceback = job.exception_class_path = ""
    Job.objects.filter(pk=job.pk).exclude(status__in=FINAL_STATUSES).update(
        status=Status.FAILED, error=error, traceback="", exception_class_path="", finished_at=now
    )
    create_callbacks([job], now)


def holds_environment_slot(attempt: Attempt) -> bool:
    return attempt.wait == Wait.NONE


def holds_queue_slot(attempt: Attempt) -> bool:
    """A waiting attempt keeps its queue slot unless the job it waits on runs in its queue."""
    return attempt.wait == Wait.NONE or attempt.wait_queue != attempt.queue


def create_callbacks(finished: list[Job], now: datetime) -> None:
    """Create the on_complete job of each finished job that asked for one, owned by the
    same owner."""
    callbacks = []
    retry = ratequeue_settings().DEFAULT_RETRIES.to_json()
    for job in finished:
        if not job.on_complete:
            continue
        outcome = {
            "job_id": job.pk,
            "status": str(job.status),
            "result": job.result if job.status == Status.COMPLETE else None,
            "error": job.error if job.status == Status.FAILED else None,
            "context": job.context,
        }
        callbacks.append(
            Job(
                id=new_job_id(),
                func=job.on_complete,
                args=[outcome],
                kwargs={},
                queue="default",
                status=Status.WAITING,
                start_at=now,
                created_at=now,
                retry=retry,
                owner=job.owner,  # what it reports is its owner's to read
            )
        )
    if callbacks:
        Job.objects.bulk_create(callbacks)


def waiting_queues(after: str = "") -> list[str]:
    """Up to QUEUES_PER_STEP queues that have WAITING jobs, in turns: the queues after
    ``after`` by name, then from the first one on. Found by skipping through the dispatch
    index (one index probe per queue, however many jobs wait)."""
    table = connection.ops.quote_name(Job._meta.db_table)
    sql = (
        f"WITH RECURSIVE q(name) AS ("
        f" SELECT MIN(queue) FROM {table} WHERE status = %s AND queue > %s"
        f" UNION ALL"
        f" SELECT (SELECT MIN(queue) FROM {table} WHERE status = %s AND queue > q.name)"
        f" FROM q WHERE q.name IS NOT NULL"
        f") SELECT name FROM q WHERE name IS NOT NULL LIMIT %s"
    )
    waiting = Status.WAITING.value
    with connection.cursor() as cursor:
        cursor.execute(sql, [waiting, after, waiting, QUEUES_PER_STEP])
        queues = [row[0] for row in cursor.fetchall()]
        if after and len(queues) < QUEUES_PER_STEP:  # wrap around to the first queues
            cursor.execute(sql, [waiting, "", waiting, QUEUES_PER_STEP - len(queues)])
            queues.extend(name for (name,) in cursor.fetchall() if name <= after)
    return queues

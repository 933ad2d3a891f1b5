"""The main loop: the only code that moves jobs between statuses, one pass at a time.

A pass owns one ``generation`` of ``LoopState`` (:func:`take_pass`) and works in steps,
each one transaction that renews its lease first: recover lost attempts, apply cancels,
finish ended attempts (:mod:`.transitions`), give resuming waits their slots, promote due
jobs, start what the limits allow (:mod:`.dispatch`), then rest or go on. Its batches go
to django-q2 by path (:mod:`.wakeup`); the task that runs a pass and the batch it keeps
is :func:`.runner.main_loop`. docs/concepts.md ("The queue engine") tells the design:
who writes which table, the statuses, the loop states and the invariants.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from .. import clock
from ..conf import ratequeue_settings
from .dispatch import Dispatch
from .models import DEFERRED_STATUSES, Attempt, Job, LoopState, LoopStatus, queue_db
from .retention import prune_in_background
from .transitions import STEP_LIMIT, apply_cancels, finish, promote_due, recover
from .wakeup import (
    LOOP_TASK,
    RUNNER_TASK,
    enqueue_task,
    ensure_loop_state,
    lease_end,
    segment_ceiling,
)


def take_pass(generation: int, **seen: Any) -> Loop | None:
    """The pass after ``generation``, if this contender wins it (only one can)."""
    now = clock.now()
    won = LoopState.objects.take(generation, lease_end(now), now, **seen)
    return Loop(generation + 1) if won else None


def take_resting_pass() -> Loop | None:
    """The loop's next pass, for this process to run, if the loop rests. A runner whose
    batch freed slots and that is about to go idle runs that pass itself rather than kick
    one through the broker: a broker round trip saved per pass. None if a pass is running
    (it sees the freed slots at its next step) or another kick won."""
    generation, state, _next_wake_at, _lease_end = ensure_loop_state()
    if state == LoopStatus.RUNNING:
        return None
    return take_pass(generation, state=state)


class Loop:
    """The work of one pass, in steps; ``generation`` is the one this pass owns."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.settings = ratequeue_settings()
        self.dispatch = Dispatch(self.settings)
        self._last_recovery = 0.0
        # The batch this pass keeps, to run in its own process once it rests; and until
        # when (monotonic) this pass and that batch may go on.
        self.inline_batch: list[int] = []
        self.until = 0.0
        # Set by a step: it hit a per-step limit (more_work), or left the loop resting, and
        # when the resting loop wants waking.
        self.more_work = False
        self.rested = False
        self.rest_state: str = LoopStatus.RUNNING
        self.next_wake: datetime | None = None

    def run(self, in_watchdog: bool = False) -> None:
        """Step for at most half a lease; the batch kept is left in ``inline_batch`` for
        the caller to run (:func:`.runner.main_loop`), or, in the watchdog's thread, handed
        to the broker: no job runs there, its heartbeats must go on."""
        if in_watchdog:
            self.work(self.settings.HEARTBEAT_INTERVAL, linger=False)
            if self.inline_batch:
                enqueue_task(RUNNER_TASK, self.inline_batch)
            return
        self.until = time.monotonic() + self.settings.LOOP_LEASE / 2
        self.work(self.until - time.monotonic())

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
        pause = (self.next_wake - clock.now()).total_seconds()
        return max(pause, 0.0) if pause <= self.settings.WATCHDOG_INTERVAL else None

    def hand_over(self) -> None:
        """Continue in a fresh django-q2 task (which bumps the generation)."""
        now = clock.now()
        with transaction.atomic(using=queue_db()):
            if LoopState.objects.mark_running(self.generation, lease_end(now), now):
                enqueue_task(LOOP_TASK, self.generation)

    def step(self) -> bool | None:
        """One transaction of loop work; None if this pass lost its generation."""
        now = clock.now()
        with transaction.atomic(using=queue_db()):
            if not LoopState.objects.renew(self.generation, lease_end(now), now):
                return None
            self.more_work = False
            did_work = self.recover(now)
            # Cancels before completions: a job canceled before the loop took in its
            # attempt's end ends CANCELED, whichever of the two reached the database first.
            canceled, more_cancels = apply_cancels(now)
            did_work |= canceled
            self.more_work |= more_cancels
            active = list(
                Attempt.objects.filter(active=True).only(
                    "job", "queue", "concurrency_key", "ended_at", "wait", "wait_queue"
                )
            )
            ended = [a.pk for a in active if a.ended_at is not None]
            if ended:
                self.more_work |= len(ended) > STEP_LIMIT
                finish(ended[:STEP_LIMIT], now)
                did_work = True
            running = [a for a in active if a.ended_at is None]
            self.dispatch.read_limits()
            did_work |= self.dispatch.grant_resumes(running)
            promoted = promote_due(now)
            self.more_work |= promoted == STEP_LIMIT
            did_work |= bool(promoted)
            started, waiting_left = self.dispatch.start_ready(running, now)
            self.deal(started, now)
            did_work |= bool(started)
            running.extend(started)
            # Rest as soon as nothing is left to do right now, even after doing some work.
            self.rested = not (self.more_work or (started and waiting_left))
            state: str = LoopStatus.RUNNING
            wake: datetime | None = None
            if self.rested:
                state, wake = self.resting_state(running, waiting_left, now)
            self.rest_state, self.next_wake = state, wake
            LoopState.objects.rest(state, wake)
        if not did_work:
            prune_in_background()
        return did_work

    def recover(self, now: datetime) -> bool:
        """Recover lost and overrun attempts, at most once per WATCHDOG_INTERVAL."""
        if time.monotonic() - self._last_recovery < self.settings.WATCHDOG_INTERVAL:
            return False
        self._last_recovery = time.monotonic()
        return recover(now, timedelta(seconds=self.settings.WORKER_DEAD_AFTER))

    def deal(self, started: list[Attempt], now: datetime) -> None:
        """Keep the first batch of the started attempts to run here; the others become
        django-q2 tasks, in this step's transaction with the ORM broker."""
        if not started:
            return
        for batch in self.dispatch.batches([a.pk for a in started], now):
            if self.inline_batch:
                enqueue_task(RUNNER_TASK, batch)
            else:
                self.inline_batch = batch

    def resting_state(
        self, running: list[Attempt], waiting_left: bool, now: datetime
    ) -> tuple[str, datetime | None]:
        """The state a step leaves the loop in when nothing is left to do now, and when
        it wants waking: the next deferred start, rate-limit time, or recovery look."""
        wakes = [
            start
            for status in DEFERRED_STATUSES
            for start in Job.objects.filter(status=status)
            .order_by("start_at")
            .values_list("start_at", flat=True)[:1]
        ]
        wakes.extend(self.dispatch.wakes())
        if running:
            # Look again for dead workers and overruns even if no completion arrives.
            wakes.append(now + timedelta(seconds=self.settings.WORKER_DEAD_AFTER))
        wake = segment_ceiling(min(wakes)) if wakes else None
        holding = sum(a.holds_environment_slot for a in running)
        if waiting_left and holding >= self.dispatch.max_concurrency:
            return LoopStatus.SATURATED, wake
        if wake is not None or waiting_left:
            return LoopStatus.SCHEDULED, wake
        return LoopStatus.IDLE, None

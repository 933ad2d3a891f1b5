"""The engine's phases of a loop step, in the order :class:`.loop.Loop` runs them.

Each phase is a small unit that takes the :class:`Step` the phases share, reads what the
earlier ones left in it and adds what it did; the plug-ins' phases (:mod:`.hooks`) run
among them. docs/concepts.md ("The main loop") tells why they come in this order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine.deferred import next_deferred_start
from django_ratequeue.engine.dispatch import Dispatch
from django_ratequeue.engine.lease import Renewal
from django_ratequeue.engine.models import Attempt, Job, LoopState, LoopStatus, Status, queue_db
from django_ratequeue.engine.moves import Moves
from django_ratequeue.engine.recovery import recover
from django_ratequeue.engine.roster import Roster
from django_ratequeue.engine.transitions import STEP_LIMIT, apply_cancels, finish, promote_due
from django_ratequeue.engine.wakeup import JOBS, segment_ceiling, signal
from django_ratequeue.signals import announce, listened

# What a step reads of each active attempt.
ACTIVE_FIELDS = (
    "job",
    "queue",
    "concurrency_key",
    "ended_at",
    "wait",
    "wait_queue",
    "worker",
    "remote",
)


@dataclass
class Step:
    """Hold what one step's phases share: its inputs, what they found and what they did."""

    now: datetime
    renewal: Renewal
    moves: Moves = field(default_factory=Moves)
    # A phase moved something (the loop prunes in the background after a step without).
    did_work: bool = False
    # A phase hit its per-step limit: the loop steps again at once.
    more_work: bool = False
    # The ids of the attempts that ended, and the attempts still running (then started).
    ended: list[int] = field(default_factory=list)
    running: list[Attempt] = field(default_factory=list)
    started: list[Attempt] = field(default_factory=list)
    # WAITING jobs remain after the dispatch.
    waiting_left: bool = False
    # The earliest start of a deferred job after this step (None: none).
    deferred: datetime | None = None
    # When the phases want the resting loop woken (a plug-in's next due work, say): a
    # time, or a function that tells it, asked only if the loop rests.
    wakes: list[datetime | Callable[[], datetime | None]] = field(default_factory=list)
    # Set by the rest phase: nothing is left to do now; when to wake (None: on a signal).
    rested: bool = False
    wake: datetime | None = None

    def __post_init__(self) -> None:
        self.deferred = self.renewal.next_deferred


class Recovery:
    """End lost and overrun attempts, at most once per WATCHDOG_INTERVAL."""

    def __init__(self, settings: RateQueueSettings) -> None:
        self.interval = settings.WATCHDOG_INTERVAL
        self.dead_after = timedelta(seconds=settings.WORKER_DEAD_AFTER)
        self.last_run = 0.0

    def __call__(self, step: Step) -> None:
        if time.monotonic() - self.last_run < self.interval:
            return
        self.last_run = time.monotonic()
        step.did_work |= recover(step.now, self.dead_after)


def cancel(step: Step) -> None:
    """Apply the cancel requests waiting, if any.

    Before the ends are taken in: a job canceled before the loop took in its attempt's
    end ends CANCELED, whichever of the two reached the database first."""
    if step.renewal.cancels_waiting:
        canceled, more_cancels = apply_cancels(step.now, step.moves)
        step.did_work |= canceled
        step.more_work |= more_cancels


def read_active(step: Step) -> None:
    """Read the active attempts: the ids of those that ended, and those that run."""
    active = list(Attempt.objects.filter(active=True).only(*ACTIVE_FIELDS))
    step.ended = [a.pk for a in active if a.ended_at is not None]
    step.running = [a for a in active if a.ended_at is None]


def finish_ended(step: Step) -> None:
    """Apply the outcome of the attempts that ended to their jobs, STEP_LIMIT at most."""
    if not step.ended:
        return
    step.more_work |= len(step.ended) > STEP_LIMIT
    retry_at = finish(step.ended[:STEP_LIMIT], step.now, step.moves)
    step.deferred = min(filter(None, [step.deferred, retry_at]), default=None)
    step.did_work = True


def promote(step: Step) -> None:
    """Turn the deferred jobs that are due WAITING, a retry due at once included."""
    if step.deferred is None or step.deferred > step.now:
        return
    promoted = promote_due(step.now)
    step.more_work |= promoted == STEP_LIMIT
    step.deferred = next_deferred_start()
    step.did_work |= bool(promoted)


class Resume:
    """Give their slots back to the attempts whose subtask wait is over."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch

    def __call__(self, step: Step) -> None:
        renewal = step.renewal
        self.dispatch.read_limits(renewal)
        step.did_work |= self.dispatch.grant_resumes(step.running)


class Start:
    """Start the WAITING jobs the limits allow."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch

    def __call__(self, step: Step) -> None:
        step.started, step.waiting_left = self.dispatch.start_ready(
            step.running, step.now, step.moves
        )
        step.running.extend(step.started)
        step.did_work |= bool(step.started)


class Ring:
    """Wake the runners that will take the step's new attempts, and the jobs' watchers.

    The runners are chosen by the :class:`.roster.Roster` (every runner, for an attempt
    left unclaimed); the watchers are the HTTP API's event streams, woken if anything
    moved. One statement, and the roster's read of the runners every WATCHDOG_INTERVAL."""

    def __init__(self, roster: Roster) -> None:
        self.roster = roster

    def __call__(self, step: Step) -> None:
        jobs = {job.pk: job for job, _ready in step.moves.started}
        started = [(jobs[attempt.job_id], attempt) for attempt in step.started]
        channels = self.roster.channels(started, step.running, step.now)
        if self.roster.called:
            step.wakes.append(self.roster.next_recall)
        if step.did_work:
            channels.add(JOBS)
        signal(*sorted(channels))


class Rest:
    """Record whether the loop rests after the step, in which state, and until when."""

    def __init__(self, dispatch: Dispatch, settings: RateQueueSettings) -> None:
        self.dispatch = dispatch
        self.dead_after = timedelta(seconds=settings.WORKER_DEAD_AFTER)
        # The state and wake-up time the last step wrote.
        self.recorded: tuple[str, datetime | None] | None = None

    def __call__(self, step: Step) -> None:
        # Rest as soon as nothing is left to do right now, even after doing some work.
        step.rested = not (step.more_work or (step.started and step.waiting_left))
        state: str = LoopStatus.RUNNING
        if step.rested:
            state, step.wake = self.resting_state(step)
        if (state, step.wake) != self.recorded:  # as the last step left it: nothing to write
            LoopState.objects.rest(state, step.wake)
            self.recorded = (state, step.wake)

    def resting_state(self, step: Step) -> tuple[str, datetime | None]:
        """Return the state of the resting loop and when it wants waking.

        It wakes for the next deferred start, rate-limit time, look for lost attempts, or
        time a phase asked for (``Step.wakes``)."""
        asked = (wake() if callable(wake) else wake for wake in step.wakes)
        wakes = [wake for wake in asked if wake is not None]
        if step.deferred is not None:
            wakes.append(step.deferred)
        wakes.extend(self.dispatch.wakes())
        if step.running:
            # Look again for dead workers and overruns even if no completion arrives.
            wakes.append(step.now + self.dead_after)
        wake = segment_ceiling(min(wakes)) if wakes else None
        holding = sum(a.holds_environment_slot for a in step.running)
        if step.waiting_left and holding >= self.dispatch.max_concurrency:
            return LoopStatus.SATURATED, wake
        if wake is not None or step.waiting_left:
            return LoopStatus.SCHEDULED, wake
        return LoopStatus.IDLE, None


def announce_moves(step: Step) -> None:
    """Announce the attempts that ended and the jobs that finished, once the step commits.

    The lifecycle's signals and log records (:mod:`django_ratequeue.signals`); nothing
    is built when nothing listens."""
    db = queue_db()
    if listened("attempt_finished"):
        announce("attempt_finished", db, [attempt_record(job, a) for job, a in step.moves.ran])
    if listened("job_finished"):
        announce("job_finished", db, [job_record(job) for job in step.moves.finished])


def attempt_record(job: Job, attempt: Attempt) -> dict[str, Any]:
    """Return the ``attempt_finished`` arguments of an attempt that ran."""
    assert attempt.started_at is not None and attempt.ended_at is not None
    return {
        "job_id": job.pk,
        "func": job.func,
        "queue": job.queue,
        "attempt_id": attempt.pk,
        "outcome": attempt.outcome,
        "run_seconds": (attempt.ended_at - attempt.started_at).total_seconds(),
        "error": attempt.error.partition("\n")[0],
        "status": str(job.status),
        "retry_at": job.start_at.isoformat() if job.status == Status.RETRYING else None,
    }


def job_record(job: Job) -> dict[str, Any]:
    """Return the ``job_finished`` arguments of a job that reached a final status."""
    return {
        "job_id": job.pk,
        "func": job.func,
        "queue": job.queue,
        "status": str(job.status),
        "attempts": job.attempts,
    }

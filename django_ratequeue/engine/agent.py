"""The agent: one daemon thread in every django-q2 worker process.

It keeps the process's heartbeat and takes part in electing the loop's leader: each
:meth:`Agent.turn` is one move of a two-state machine (follower or leader), then the
thread waits for a ``LOOP`` signal or the time the turn asked for (:class:`.wakeup.Waiter`).
docs/concepts.md ("One wake-up protocol") tells the states and their invariants.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

from django.db import close_old_connections
from django.dispatch import receiver
from django_q.signals import post_spawn

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.heartbeat import beat, take_over_gone_here, worker_id
from django_ratequeue.engine.loop import Loop
from django_ratequeue.engine.models import LoopState, queue_connection
from django_ratequeue.engine.wakeup import LOOP, Waiter, lease_end, signal

logger = logging.getLogger("django_ratequeue.queue")


def take_lapsed_lease() -> Loop | None:
    """Take the loop's lapsed lease for this process, and return the loop it now leads.

    The lease lapsed when it was not renewed for two ``WATCHDOG_INTERVAL`` (or nobody ever
    took it). Return None while a leader renews it, or if another contender won it (the
    generation counter admits one)."""
    state = LoopState.objects.ensure()
    now = clock.now()
    grace = timedelta(seconds=2 * ratequeue_settings().WATCHDOG_INTERVAL)
    # Renewed last at (expires - LOOP_LEASE); lapsed when that is more than ``grace`` ago.
    expires = state.lease_expires_at
    if expires is not None and expires >= lease_end(now - grace):
        return None
    if not LoopState.objects.take(state.generation, lease_end(now), now, leader=worker_id()):
        return None
    if expires is not None and expires > now and state.leader:
        # A cluster stopped or restarted leaves its lease to run out; a hung one too.
        logger.info(
            "Worker %s leads the main loop (generation %s), taking over from worker %s, "
            "which stopped renewing its lease",
            worker_id(),
            state.generation + 1,
            state.leader,
        )
    else:
        logger.info(
            "Worker %s leads the main loop (generation %s)", worker_id(), state.generation + 1
        )
    return Loop(state.generation + 1)


class Agent:
    """Keep the agent's state machine: ``loop`` is set while this process leads."""

    def __init__(self) -> None:
        self.loop: Loop | None = None
        self.started = False
        self.born = time.monotonic()

    def turn(self) -> float:
        """Make one move, and return how long to wait for a signal before the next."""
        settings = ratequeue_settings()
        beat(force=not self.started)
        self.started = True
        # A new process: were its host's others restarted, take their work over now.
        new = time.monotonic() - self.born < settings.WORKER_DEAD_AFTER
        if new and take_over_gone_here():
            signal(LOOP)
        if self.loop is None:
            self.loop = take_lapsed_lease()
            if self.loop is None:
                return settings.WATCHDOG_INTERVAL
        if not self.loop.run(settings.WATCHDOG_INTERVAL):
            self.loop = None  # another process took the lease: follow
            return settings.WATCHDOG_INTERVAL
        if not self.loop.rested:
            return 0.0
        pause = settings.WATCHDOG_INTERVAL
        if self.loop.next_wake is not None:
            pause = min(pause, (self.loop.next_wake - clock.now()).total_seconds())
        return max(pause, 0.0)


def run_agent() -> None:
    """Run the agent thread: turns, and waits between them.

    Only the leader listens for signals: a follower has nothing to do with them but look
    at the lease."""
    agent = Agent()
    waiter = Waiter((LOOP,))
    while True:
        try:
            close_old_connections()
            pause = agent.turn()
        except Exception:
            logger.exception("The ratequeue agent's turn failed")
            queue_connection().close()
            agent.loop = None
            pause = ratequeue_settings().WATCHDOG_INTERVAL
        if agent.loop is None:
            waiter.close()
            time.sleep(pause)
        elif pause > 0:
            waiter.wait(pause)


@receiver(post_spawn)
def start_agent(sender: Any = None, **kwargs: Any) -> None:
    threading.Thread(target=run_agent, name="ratequeue-agent", daemon=True).start()


__all__ = ["Agent", "run_agent", "take_lapsed_lease"]

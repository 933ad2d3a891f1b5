"""The main loop: the only code that moves jobs between statuses, one step at a time.

One process at a time leads it, owning a ``generation`` of ``LoopState`` (:mod:`.agent`
elects it). Each step is one transaction that renews the lease first (:mod:`.lease`),
then runs the phases of :mod:`.phases` in order, with the plug-ins' (:mod:`.hooks`).
docs/concepts.md ("The queue engine") tells the design: who writes which table, the
statuses, the loop states, the invariants.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from django.db import transaction

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import hooks
from django_ratequeue.engine.dispatch import Dispatch
from django_ratequeue.engine.lease import Lease
from django_ratequeue.engine.models import queue_db
from django_ratequeue.engine.phases import (
    Recovery,
    Rest,
    Resume,
    Ring,
    Start,
    Step,
    announce_moves,
    cancel,
    finish_ended,
    promote,
    read_active,
)
from django_ratequeue.engine.roster import Roster


class Loop:
    """Do the work of the leader, in steps; ``generation`` is the one it owns."""

    def __init__(self, generation: int) -> None:
        settings = ratequeue_settings()
        self.lease = Lease(generation)
        self.dispatch = Dispatch(settings)
        self.recovery = Recovery(settings)
        self.rest = Rest(self.dispatch, settings)
        engine_phases: list[tuple[str, hooks.Phase]] = [
            ("recovery", self.recovery),
            ("cancel", cancel),  # before finish_ended: a cancel wins over an end not taken in yet
            ("read_active", read_active),
            ("finish_ended", finish_ended),
            ("resume", Resume(self.dispatch)),  # before start: waits resume before anything new
            ("promote", promote),
            ("start", Start(self.dispatch)),
            ("ring", Ring(Roster(settings))),
            ("rest", self.rest),
            ("announce", announce_moves),
        ]
        self.phases: tuple[Callable[[Step], None], ...] = tuple(
            hooks.place(engine_phases, settings)
        )
        # What the last step found: it hit a per-step limit (more_work), or left the loop
        # resting, and when the resting loop wants waking.
        self.more_work = False
        self.rested = False
        self.next_wake: datetime | None = None

    @property
    def generation(self) -> int:
        return self.lease.generation

    def run(self, seconds: float) -> bool:
        """Step until nothing is left to do now, for at most ``seconds``.

        Return False if this process lost the lease (another leads)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.step() is None:
                return False
            if self.rested or time.monotonic() > deadline:
                return True

    def step(self) -> bool | None:
        """Run one step in one transaction; return whether it did work.

        Return None if this process lost its generation."""
        now = clock.now()
        with transaction.atomic(using=queue_db()):
            renewal = self.lease.renew(now)
            if renewal is None:
                return None
            step = Step(now, renewal)
            for phase in self.phases:
                phase(step)
        self.more_work, self.rested, self.next_wake = step.more_work, step.rested, step.wake
        if not step.did_work:
            hooks.do_idle_work()
        return step.did_work

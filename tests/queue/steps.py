"""Driving the queue in this process, step by step, as a cluster's parts would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_ratequeue import clock
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.loop import Loop
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import LoopState


def leading_loop() -> Loop:
    """The loop, led by this process from the current generation (as if it held the
    lease: its steps renew it)."""
    return Loop(LoopState.objects.ensure().generation)


def run_pass() -> Loop:
    """Step the loop until it rests, then let a runner of this process run everything
    dispatched (as the leader and a serving runner would)."""
    loop = leading_loop()
    loop.run(30)
    Runner(beat(force=True)).drain()
    return loop


class Clock:
    """The queue's clock (:mod:`django_ratequeue.clock`), standing still until moved."""

    def __init__(self) -> None:
        self.moment = datetime.now(tz=UTC)

    def now(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


def freeze(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Stop the queue's clock (until the test ends) and return it, to move by hand."""
    moved = Clock()
    monkeypatch.setattr(clock, "now", moved.now)
    monkeypatch.setattr(clock, "timestamp", lambda: moved.now().timestamp())
    return moved

"""The waiting claims' bell, step by step: a ``WORK`` signal wakes the claims one after
the other, each once, instead of all of them at once (engine/bell.py, ``WorkBell``).

The test plays the listener: it rings the bell itself, and no thread listens."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from django_ratequeue.engine.bell import WorkBell
from tests.cluster import wait_for

# Long enough never to run out in a passing test.
LONG = 30.0


@pytest.fixture
def bell(monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkBell]:
    bell = WorkBell()
    monkeypatch.setattr(bell, "_ensure_thread", lambda: None)  # the test is the listener
    yield bell


def waiting(bell: WorkBell, count: int) -> None:
    wait_for(lambda: len(bell.sleepers) == count, 5, f"{count} claims to wait")


def start_claims(bell: WorkBell, count: int) -> list[threading.Event]:
    """``count`` claims waiting in this order; the events they set when woken."""
    woken = []
    for _ in range(count):
        event = threading.Event()
        seen = bell.ring_count()

        def claim(seen: int = seen, event: threading.Event = event) -> None:
            bell.wait(seen, LONG)
            event.set()

        threading.Thread(target=claim, daemon=True).start()
        waiting(bell, len(woken) + 1)
        woken.append(event)
    return woken


def test_a_signal_wakes_one_claim_and_each_look_wakes_the_next(bell: WorkBell) -> None:
    first, second, third = start_claims(bell, 3)

    bell._ring()
    wait_for(first.is_set, 5, "the longest waiting claim to wake")
    assert not second.is_set() and not third.is_set()

    bell.pass_on()  # the first claim has looked
    wait_for(second.is_set, 5, "the next claim to wake")
    assert not third.is_set()

    bell.pass_on()
    wait_for(third.is_set, 5, "the last claim to wake")
    bell.pass_on()  # nobody is left to wake
    assert bell.sleepers == []


def test_a_claim_looks_once_per_signal(bell: WorkBell) -> None:
    """The chain ends once every claim waiting at the signal has looked: a claim that
    waits again after its look is not woken for the same signal."""
    (first,) = start_claims(bell, 1)
    bell._ring()
    wait_for(first.is_set, 5, "the claim to wake")

    (again,) = start_claims(bell, 1)  # it looked, and waits again
    bell.pass_on()
    assert not again.wait(0.2)
    bell._ring()  # a new signal wakes it
    wait_for(again.is_set, 5, "the claim to wake for the new signal")


def test_a_signal_between_a_look_and_its_wait_is_not_missed(bell: WorkBell) -> None:
    seen = bell.ring_count()
    bell._ring()  # while the claim looks
    done = threading.Event()
    threading.Thread(target=lambda: (bell.wait(seen, LONG), done.set()), daemon=True).start()
    wait_for(done.is_set, 5, "the wait to return at once")
    assert bell.sleepers == []


def test_a_claim_that_times_out_leaves_the_line(bell: WorkBell) -> None:
    seen = bell.ring_count()
    bell.wait(seen, 0.01)
    assert bell.sleepers == []
    (claim,) = start_claims(bell, 1)
    bell._ring()  # wakes the claim still waiting, not the one that left
    wait_for(claim.is_set, 5, "the waiting claim to wake")

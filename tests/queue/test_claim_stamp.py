"""A claim stamps its attempts' start once it may write, never before their dispatch."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction

from django_ratequeue import enqueue
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Attempt, queue_db
from django_ratequeue.engine.runner import Runner
from tests.queue import jobs
from tests.queue.steps import freeze, leading_loop

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "connection.vendor != 'sqlite'", reason="SQLite's claim waits for the write lock"
    ),
]


def test_a_claim_that_waited_for_the_write_lock_starts_after_the_dispatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = freeze(monkeypatch)
    enqueue(jobs.add, args=[1, 2])
    runner = Runner(beat(force=True))
    waiting = threading.Event()  # the runner's claim is at the lock the step holds
    claimed: list[Attempt] = []

    def note_the_wait(execute: Any, sql: str, *args: Any) -> Any:
        if sql.startswith(("BEGIN", "UPDATE", "WITH")):
            waiting.set()
        return execute(sql, *args)

    def claim() -> None:
        try:
            with connection.execute_wrapper(note_the_wait):
                claimed.extend(runner.claim(1))
        finally:
            connections.close_all()

    claimer = threading.Thread(target=claim)
    with transaction.atomic(using=queue_db()):  # the leader's step holds the write lock
        loop = leading_loop()
        claimer.start()
        assert waiting.wait(timeout=30), "the claim never reached the database"
        moved.advance(5)  # the step goes on while the claim waits
        loop.step()  # it dispatches the job
    claimer.join(timeout=60)

    assert len(claimed) == 1
    attempt = Attempt.objects.get()
    assert attempt.started_at is not None
    assert attempt.started_at >= attempt.dispatched_at

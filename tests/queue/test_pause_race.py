"""A runtime change holds every job enqueued once its function returned, even one that a
step already under way reads (PostgreSQL: a step's later reads see later commits)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections
from django.test import override_settings

from django_ratequeue import enqueue, pause_queue
from django_ratequeue.engine.models import Job, Status
from django_ratequeue.engine.phases import Step
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="a SQLite step holds the write lock"
    ),
]


def elsewhere(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any], list[int]]:
    """Start ``call`` in a thread of its own connection; return it, its result and its pid."""
    result: list[Any] = []
    pid: list[int] = []

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            result.append(call())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result, pid


def waits_on_a_lock(pid: list[int]) -> bool:
    """Say whether the backend ``pid`` holds waits for a lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = %s", pid)
        return bool(cursor.fetchone()[0])


@override_settings(RATEQUEUE={"QUEUES": {"emails": {"max_concurrency": 2}}})
def test_a_job_enqueued_after_a_pause_returned_never_starts_in_a_step_begun_before() -> None:
    loop = leading_loop()
    loop.step()  # the step remembers the queues' runtime changes: none
    held: list[Any] = []

    def pause_then_enqueue() -> Any:
        pause_queue("emails")
        held.append(enqueue(jobs.add, args=[1, 2], queue="emails"))

    def race(step: Step) -> None:
        """Pause and enqueue elsewhere, after this step's lease renewal read the changes."""
        thread, _result, pid = elsewhere(pause_then_enqueue)
        wait_for(lambda: not thread.is_alive() or (pid and waits_on_a_lock(pid)))

    loop.phases = (race, *loop.phases)
    loop.step()
    loop.phases = loop.phases[1:]
    wait_for(lambda: bool(held))
    loop.step()
    assert Job.objects.get(pk=held[0].id).status == Status.WAITING

"""A bulk enqueue with an id lets the INSERT decide which ids are taken: a job written
meanwhile under one of its ids is a DuplicateJobId (nothing written), or with
``on_duplicate_id="ignore"`` the caller's own job, never another owner's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction

from django_ratequeue import enqueue_many
from django_ratequeue.exceptions import DuplicateJobId
from django_ratequeue.models import Job

GREET = "tests.api.jobs.greet"


@contextmanager
def open_transaction(write: Callable[[], Any]) -> Iterator[None]:
    """Run ``write`` in a transaction of another connection, held open until the block
    ends, then committed."""
    written, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                write()
                written.set()
                release.wait(10)
        except BaseException as error:  # pragma: no cover - reported below
            failures.append(error)
            written.set()
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert written.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join(10)
    assert not failures


def blocked_call(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start ``call`` in a thread of its own (its own connection); its outcome, a value or
    an exception, lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:
            outcome.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def race(holder: Callable[[], Any], racer: Callable[[], Any]) -> Any:
    """``racer`` starts while ``holder``'s transaction is open and has written its rows
    (the racer's INSERT waits for it), then the holder commits; the racer's outcome."""
    with open_transaction(holder):
        thread, outcome = blocked_call(racer)
        time.sleep(0.5)  # the racer reads, finds nothing committed, and waits in its INSERT
        assert thread.is_alive()
    thread.join(10)
    return outcome[0]


pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="two writers at once: PostgreSQL"
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("on_duplicate_id", ["error", "ignore"])
def test_ids_written_meanwhile_by_another_owner_are_a_duplicate(on_duplicate_id: str) -> None:
    outcome = race(
        lambda: enqueue_many(GREET, ["Alice", "Alan"], id="tag", owner="alice"),
        lambda: enqueue_many(
            GREET, ["Bob", "Bea", "Ben"], id="tag", owner="bob", on_duplicate_id=on_duplicate_id
        ),
    )

    assert isinstance(outcome, DuplicateJobId), outcome
    assert outcome.job_id in {"tag-0", "tag-1"}
    rows = Job.objects.order_by("id").values_list("id", "owner", "args")
    assert list(rows) == [("tag-0", "alice", ["Alice"]), ("tag-1", "alice", ["Alan"])]


@pytest.mark.django_db(transaction=True)
def test_ignore_hands_back_the_callers_own_jobs_written_meanwhile() -> None:
    handles = race(
        lambda: enqueue_many(GREET, ["Alice", "Alan"], id="tag", owner="alice"),
        lambda: enqueue_many(
            GREET, ["A1", "A2", "A3"], id="tag", owner="alice", on_duplicate_id="ignore"
        ),
    )

    assert [handle.id for handle in handles] == ["tag-0", "tag-1", "tag-2"]
    rows = Job.objects.order_by("id").values_list("id", "owner", "args")
    assert list(rows) == [
        ("tag-0", "alice", ["Alice"]),
        ("tag-1", "alice", ["Alan"]),
        ("tag-2", "alice", ["A3"]),
    ]

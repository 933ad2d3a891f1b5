"""Migration 0024: the loop's row keeps only the lease. The turns, the runtime limits and
the rollups' cursor move to rows of their own, with the values they had; its reverse
puts them back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.fairness.turns import Turns
from django_ratequeue.engine.lease import Lease
from django_ratequeue.engine.limits import environment_limit
from django_ratequeue.models import LoopState
from django_ratequeue.plugins.rollups.counting import counted_arrivals

BEFORE = [("django_ratequeue", "0023_workerheartbeat_functions")]
AFTER = [("django_ratequeue", "0024_loop_state_holds_the_lease")]
# What a loop that ran a while left in the row: none of it a column's default.
MOVED: dict[str, Any] = {
    "key_cursors": {"llm": "acme", "emails": "bob"},
    "queue_cursor": "llm",
    "key_credits": {"llm": 2},
    "key_limits_version": 7,
    "max_concurrency": 12,
    "arrivals_until": datetime(2026, 12, 4, 9, 30, 15, tzinfo=UTC),
}


def migrate(target: list[tuple[str, str]] | None = None) -> MigrationExecutor:
    """Migrate the test database to ``target``, or to the latest migrations."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target or executor.loader.graph.leaf_nodes())
    return executor


def old_loop_state(executor: MigrationExecutor) -> Any:
    """Return the LoopState model as migration 0023 left it."""
    apps = executor.loader.project_state(BEFORE[0]).apps
    return apps.get_model("django_ratequeue", "LoopState")


@pytest.mark.django_db(transaction=True)
def test_the_moved_values_reach_their_rows_and_go_back() -> None:
    try:
        old = old_loop_state(migrate(BEFORE))
        old.objects.create(pk=LoopState.SINGLETON, generation=41, **MOVED)
        migrate(AFTER)
        turns = Turns()
        turns.load()
        assert (turns.keys, turns.queue, turns.credits) == (
            MOVED["key_cursors"],
            MOVED["queue_cursor"],
            MOVED["key_credits"],
        )
        assert environment_limit() == 12
        assert counted_arrivals() == MOVED["arrivals_until"]
        with transaction.atomic():  # the step's renewal reads them by name
            renewal = Lease(41).renew(clock.now())
        assert renewal is not None
        assert (renewal.max_concurrency, renewal.key_limits_version) == (12, 7)
        assert renewal.arrivals_until == MOVED["arrivals_until"]
        old = old_loop_state(migrate(BEFORE))
        back = old.objects.values(*MOVED).get()
        assert back == MOVED
    finally:
        migrate()  # the later migrations too, for the tests that follow


@pytest.mark.django_db(transaction=True)
def test_a_database_without_a_loop_row_migrates_to_no_rows() -> None:
    try:
        migrate(BEFORE)
        migrate(AFTER)
        turns = Turns()
        turns.load()
        assert (turns.keys, turns.queue, turns.credits) == ({}, "", {})
        assert environment_limit() == ratequeue_settings().MAX_CONCURRENCY
        assert counted_arrivals() is None
    finally:
        migrate()

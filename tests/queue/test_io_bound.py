"""Jobs that wait on the network, as the app's users' jobs do (LLM calls, HTTP APIs), on a
real two-process cluster with slots: they run as many at once as the slots and limits
allow, sync and ``async def`` alike, counted at the server they wait on."""

from __future__ import annotations

from typing import Any

import pytest

from bench.io import Server
from bench.jobs import await_on_network, wait_on_network
from django_ratequeue import enqueue_many, set_queue_concurrency
from django_ratequeue.models import Attempt


def running_at_once(attempts: Any) -> int:
    """The most attempts whose recorded runs (start to end) overlap."""
    events = []
    for started, ended in attempts.values_list("started_at", "ended_at"):
        events += [(started, 1), (ended, -1)]
    most = now = 0
    for _moment, change in sorted(events, key=lambda e: (e[0], e[1])):
        now += change
        most = max(most, now)
    return most


@pytest.fixture
def server() -> Any:
    running = Server()
    yield running
    running.stop()


@pytest.mark.parametrize("func", [wait_on_network, await_on_network])
def test_forty_one_second_waits_run_at_least_thirty_two_at_once(
    cluster: Any, server: Server, func: Any
) -> None:
    cluster(workers=2, SLOTS=32, MAX_CONCURRENCY=64)
    handles = enqueue_many(func, [[server.port, 1000]] * 40)
    assert [h.result(timeout=120) for h in handles] == [200] * 40
    assert server.stats()["peak"] >= 32
    assert server.stats()["served"] == 40


def test_a_queue_limit_holds_with_slots(cluster: Any, server: Server) -> None:
    """More slots than the queue allows: never more than its limit at once."""
    cluster(workers=2, SLOTS=16, MAX_CONCURRENCY=64)
    set_queue_concurrency("io", 5)
    handles = enqueue_many(wait_on_network, [[server.port, 200]] * 30, queue="io")
    assert [h.result(timeout=120) for h in handles] == [200] * 30
    assert server.stats()["peak"] == 5
    assert running_at_once(Attempt.objects.filter(queue="io")) <= 5

"""Every consume is counted once by its result, when its transaction commits; the totals
reach Prometheus as ``ratequeue_rate_limit_decisions_total``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import transaction
from django.test import RequestFactory
from prometheus_client.parser import text_string_to_metric_families

from django_ratequeue import TokenBucket, enqueue, rate_limit
from django_ratequeue.contrib.prometheus import metrics_view
from django_ratequeue.ratelimit.counting import TALLY, decision_totals
from tests.cluster import ROOT, Cluster, database_url
from tests.queue.jobs import decide
from tests.threads import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

THREE = TokenBucket(rate=3, period=3600)
RESERVING = TokenBucket(rate=1, period=3600, max_reserved=2)


@pytest.fixture(autouse=True)
def nothing_pending() -> None:
    TALLY.forget()


def consume_and_tell(name: str, config: TokenBucket, *, reserve: bool = False) -> str:
    """Consume once and name the result as the user sees it."""
    result = rate_limit(name, config=config, reserve=reserve)
    if not result.ok:
        return "refused"
    return "allowed" if result.retry_at is None else "reserved"


def totals() -> dict[tuple[str, str], int]:
    return {(name, result): count for name, result, count in decision_totals()}


def test_each_consume_counts_once_by_what_it_answered() -> None:
    seen = Counter(("signup", consume_and_tell("signup", THREE)) for _ in range(5))
    seen += Counter(("llm", consume_and_tell("llm", RESERVING, reserve=True)) for _ in range(4))
    assert seen == {
        ("signup", "allowed"): 3,
        ("signup", "refused"): 2,
        ("llm", "allowed"): 1,
        ("llm", "reserved"): 2,
        ("llm", "refused"): 1,
    }
    assert totals() == seen
    consume_and_tell("signup", THREE)
    assert totals()["signup", "refused"] == 3  # added to the stored count, never replacing it


def test_a_consume_in_a_rolled_back_transaction_took_nothing_and_is_not_counted() -> None:
    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        rate_limit("export", config=THREE)
        raise Undo
    with transaction.atomic():
        rate_limit("export", config=THREE)
        assert totals() == {}  # not written inside the transaction, which could roll back
    assert totals() == {("export", "allowed"): 1}


def test_threads_consuming_at_once_are_all_counted() -> None:
    def consume() -> None:
        for _ in range(25):
            rate_limit("busy", config=THREE)

    run_in_threads(consume, 4)
    assert totals() == {("busy", "allowed"): 3, ("busy", "refused"): 97}


def test_a_process_that_exits_normally_writes_all_its_counts() -> None:
    """22 decisions in a few seconds, none written as they were made (FLUSH_EVERY), all
    written as the process exits (issue 31)."""
    script = (
        "import django; django.setup()\n"
        "from tests.queue.jobs import decide\n"
        "decide.func('signup', 22)\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.queue.cluster_settings",
    }
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=120)
    assert totals() == {("signup", "allowed"): 3, ("signup", "refused"): 19}


def test_a_cluster_worker_writes_its_jobs_counts_as_the_cluster_stops(
    cluster: Callable[..., Cluster],
) -> None:
    """A django-q2 worker process ends with os._exit, skipping atexit: its stop writes."""
    running = cluster(workers=1)
    handle = enqueue(decide, args=["export", 22])
    assert handle.result(timeout=60) == 3
    running.process.send_signal(signal.SIGTERM)
    running.process.wait(timeout=60)
    assert totals() == {("export", "allowed"): 3, ("export", "refused"): 19}


def test_counts_decided_on_a_database_that_is_gone_are_not_written() -> None:
    """A test run's decisions, left as its test database is destroyed and the connection
    named the project's again: the exit writes them nowhere."""
    TALLY.add("signup", "allowed", "test_database_destroyed")
    TALLY.write()
    assert totals() == {}
    rate_limit("signup", config=THREE)
    assert totals() == {("signup", "allowed"): 1}


def test_the_scrape_exports_the_totals_as_a_counter() -> None:
    for _ in range(4):
        rate_limit("signup", config=THREE)
    response = metrics_view(RequestFactory().get("/metrics"))
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    family = families["ratequeue_rate_limit_decisions"]
    assert family.type == "counter"
    samples = {
        (s.labels["name"], s.labels["result"]): s.value
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert samples == {("signup", "allowed"): 3, ("signup", "refused"): 1}

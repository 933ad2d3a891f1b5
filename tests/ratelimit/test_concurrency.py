"""Eight OS processes race for one key on PostgreSQL: exactly the limit is admitted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_ratequeue import get_rate_limit_value, rate_limit
from django_ratequeue.ratelimit.models import RateLimitState

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def database_url_for_contenders() -> str:
    db = connection.settings_dict
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{auth}@{host}/{db['NAME']}"


def race(name: str, config: dict[str, Any], attempts: int) -> list[int]:
    """Start the contenders, release them together, and return what each admitted."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url_for_contenders(),
    }
    command = [sys.executable, "-m", "tests.ratelimit.hammer", name, json.dumps(config)]
    contenders = [
        subprocess.Popen(
            [*command, str(attempts)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for contender in contenders:
            assert contender.stdout is not None and contender.stdout.readline() == "ready\n"
        for contender in contenders:  # the start barrier: everyone is connected
            assert contender.stdin is not None
            contender.stdin.write("go\n")
            contender.stdin.flush()
        results = [int(contender.communicate(timeout=120)[0]) for contender in contenders]
    finally:
        for contender in contenders:
            contender.kill()
    assert all(contender.returncode == 0 for contender in contenders)
    return results


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


def test_only_a_decision_in_its_own_transaction_skips_the_flush_wait() -> None:
    config = {"kind": "token bucket", "rate": 10, "period": 60}
    assert rate_limit("own", config=config).ok
    assert synchronous_commit() == "on"  # SET LOCAL ended with the decision's commit
    with transaction.atomic():
        assert rate_limit("inside", config=config).ok
        assert synchronous_commit() == "on"  # the caller's writes stay fully durable


def statements(decide: Callable[[], bool]) -> tuple[bool, int]:
    """Return what ``decide`` said and how many statements it sent."""
    with CaptureQueriesContext(connection) as queries:
        said = decide()
    return said, len(queries)


def test_a_decision_outside_a_transaction_is_one_statement() -> None:
    config = {"kind": "token bucket", "rate": 10, "period": 60, "shards": 2}
    for _ in range(3):  # creates the rows, then prepares the statements
        rate_limit("steady", config=config)
    assert statements(lambda: rate_limit("steady", config=config).ok) == (True, 1)


def test_a_sharded_limit_refused_once_decides_in_one_statement() -> None:
    config = {"kind": "fixed window", "rate": 4, "period": 86400, "shards": 2}  # 2 a shard
    admitted = [rate_limit("spent", config=config).ok for _ in range(6)]
    assert admitted == [True] * 4 + [False] * 2
    assert statements(lambda: rate_limit("spent", config=config).ok) == (False, 1)


def test_one_hot_key_admits_exactly_the_limit() -> None:
    # A day-long period: refill during the race stays far below one token.
    config = {"kind": "token bucket", "rate": 100, "period": 86400}
    admitted = race("hot", config, attempts=40)
    assert sum(admitted) == 100
    assert sum(1 for n in admitted if n) > 1  # they really raced
    assert RateLimitState.objects.get(name="hot").value == pytest.approx(0, abs=0.05)


def test_one_hot_key_with_shards_admits_exactly_the_total_capacity() -> None:
    # 100 over 8 shards: shares of 12 and 13 that add up to the limit.
    config = {"kind": "fixed window", "rate": 100, "period": 86400, "shards": 8}
    admitted = race("hot-sharded", config, attempts=60)
    assert sum(admitted) == 100
    assert RateLimitState.objects.filter(name="hot-sharded").count() == 8
    assert get_rate_limit_value("hot-sharded", config=config) == 0

"""The one-statement consume of PostgreSQL decides exactly as the Python algebra does.

Random stored states, configurations, clocks and counts (arbitrary floats, not just exact
ones): the statement must admit exactly when :func:`decide` admits, store exactly the
state it returns, and among two shards take one that admits with the most tokens.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from django_ratequeue.ratelimit import sql, storage
from django_ratequeue.ratelimit.algebra import State, check_count, decide
from django_ratequeue.ratelimit.config import FixedWindow, RateLimitConfig, TokenBucket

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db]

EPOCH = 1_763_700_000.0
NAME, KEY = "sql-vs-algebra", "k"

positive = st.floats(1e-3, 1e4)
limit_fields = {
    "rate": positive | st.integers(1, 1000),
    "period": st.floats(1e-2, 1e5) | st.sampled_from([1, 60, 3600]),
    "capacity": st.none() | st.floats(0, 1e4) | st.integers(0, 1000),
    "max_reserved": st.none() | st.floats(0, 1e3) | st.integers(0, 100),
    "shards": st.integers(1, 4),
}
configs = st.builds(TokenBucket, **limit_fields) | st.builds(FixedWindow, **limit_fields)
states = st.builds(
    State,
    value=st.floats(-1e3, 1e4) | st.integers(-10, 10).map(float),
    ts=st.floats(-1e5, 1e5).map(lambda offset: EPOCH + offset),
)
clocks = st.floats(-1e5, 1e5).map(lambda offset: EPOCH + offset)
counts = st.floats(1e-3, 1e3) | st.integers(1, 20)
hypothesis_settings = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def store(found: dict[int, State]) -> None:
    storage.delete_rows(connection, NAME, KEY)
    storage.insert_rows(connection, NAME, KEY, found)


def stored() -> dict[int, State]:
    return storage.read_rows(connection, NAME, KEY)


def take(
    config: RateLimitConfig,
    candidates: tuple[int, ...],
    count: float,
    now: float,
    reserve: bool = False,
    skip_locked: bool = False,
) -> sql.Taken | None:
    """Run the consume statement on the test's key, in the test's transaction."""
    return sql.take(
        connection,
        config,
        NAME,
        KEY,
        candidates,
        count,
        now,
        reserve=reserve,
        async_commit=False,
        skip_locked=skip_locked,
    )


def fits(config: RateLimitConfig, count: float, reserve: bool) -> bool:
    try:
        check_count(config, count, reserve=reserve)
    except ValueError:
        return False
    return True


@hypothesis_settings
@given(config=configs, state=states, now=clocks, count=counts, reserve=st.booleans())
def test_one_shard_decides_and_stores_what_the_algebra_does(
    config: RateLimitConfig, state: State, now: float, count: float, reserve: bool
) -> None:
    assume(fits(config, count, reserve))
    shard = config.shard_count - 1
    store({shard: state})
    taken = take(config, (shard,), count, now, reserve=reserve)
    expected = decide(config.per_shard(shard), state, now, count, reserve=reserve)
    assert taken == sql.Taken(shard, state, expected.ok, other_admits=False)
    assert stored() == {shard: expected.state if expected.ok else state}


@hypothesis_settings
@given(
    config=configs.filter(lambda config: config.shard_count > 1),
    first=states,
    second=states,
    now=clocks,
    count=counts,
    reserve=st.booleans(),
)
def test_two_shards_take_the_one_that_admits_with_most_tokens(
    config: RateLimitConfig,
    first: State,
    second: State,
    now: float,
    count: float,
    reserve: bool,
) -> None:
    assume(fits(config, count, reserve))
    before = {0: first, 1: second}
    store(before)
    taken = take(config, (0, 1), count, now, reserve=reserve)
    assert taken is not None
    expected = {
        shard: decide(config.per_shard(shard), state, now, count, reserve=reserve)
        for shard, state in before.items()
    }
    chosen = expected[taken.shard]
    assert taken.state == before[taken.shard]
    assert not taken.other_admits  # the better shard was free, so it was taken
    assert taken.applied == chosen.ok == any(d.ok for d in expected.values())
    if chosen.ok:
        assert chosen.value == max(d.value for d in expected.values() if d.ok)
        assert stored() == {**before, taken.shard: chosen.state}
    else:
        assert stored() == before


def test_missing_rows_are_not_invented() -> None:
    config = TokenBucket(10, 60)
    taken = take(config, (0,), 1, EPOCH)
    assert taken is None
    assert stored() == {}


@pytest.mark.django_db(transaction=True)
def test_a_shard_held_by_another_consumer_is_skipped_and_reported_if_it_would_admit() -> None:
    config = FixedWindow(rate=4, period=3600, start=0, shards=2)  # 2 tokens per shard
    store({0: State(2.0, 0.0), 1: State(0.0, 0.0)})
    now = 1800.0  # within the first window: nothing refills
    with psycopg.connect(**contender_connection_params(), autocommit=False) as holder:
        holder.execute(
            'SELECT 1 FROM "django_ratequeue_ratelimitstate" WHERE name = %s AND shard = 0'
            " FOR UPDATE",
            [NAME],
        )
        taken = take(config, (0, 1), 1, now)
        assert taken == sql.Taken(1, State(0.0, 0.0), applied=False, other_admits=True)
        holder.rollback()
    assert stored() == {0: State(2.0, 0.0), 1: State(0.0, 0.0)}


def contender_connection_params() -> dict[str, object]:
    db = connection.settings_dict
    return {
        "dbname": db["NAME"],
        "user": db["USER"] or None,
        "password": db["PASSWORD"] or None,
        "host": db["HOST"] or "127.0.0.1",
        "port": db["PORT"] or 5432,
    }


@pytest.mark.django_db(transaction=True)
def test_one_shard_held_by_another_consumer_is_skipped_when_asked() -> None:
    config = FixedWindow(rate=4, period=3600, start=0, shards=2)
    store({0: State(2.0, 0.0), 1: State(2.0, 0.0)})
    with psycopg.connect(**contender_connection_params(), autocommit=False) as holder:
        holder.execute(
            'SELECT 1 FROM "django_ratequeue_ratelimitstate" WHERE name = %s AND shard = 0'
            " FOR UPDATE",
            [NAME],
        )
        taken = take(config, (0,), 1, 1800.0, skip_locked=True)
        assert taken is None
        holder.rollback()
    assert stored() == {0: State(2.0, 0.0), 1: State(2.0, 0.0)}

"""A keyed limit's rows that are full again under their key's config are pruned, key by
key: in the background a page of keys at a time, by ``manage.py ratelimits prune`` all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db.models import F
from django.test import override_settings

from django_ratequeue import rate_limit
from django_ratequeue.ratelimit import prune
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.prune import prune_all_full_rows, prune_full_rows
from tests.ratelimit import plans

pytestmark = pytest.mark.django_db

KEYED = {
    "llm": {"per_key": "tests.ratelimit.plans.plan_limit"},
    "broken": {"per_key": "tests.ratelimit.plans.broken_limit"},
}


@pytest.fixture(autouse=True)
def keyed_rows() -> Iterator[None]:
    plans.PLANS.clear()
    prune._KEYED_AFTER.clear()
    with override_settings(RATEQUEUE={"RATE_LIMITS": KEYED}):
        plans.PLANS.update({"pro-used-long-ago": "pro", "pro-used-recently": "pro"})
        consume("llm", "free-used-long-ago", aged=7200)  # 2 an hour: full again
        consume("llm", "pro-used-long-ago", aged=7200)  # 10 an hour: full again
        consume("llm", "pro-used-recently", aged=60)  # 19 + 10/60 of 20: not yet
        consume("broken", "bad", aged=7200)  # full, but its function fails now
        yield
    plans.PLANS.clear()


def consume(name: str, key: str, *, aged: float) -> None:
    """Consume one token, then move the row's time back by ``aged`` seconds."""
    if key == "bad":
        RateLimitState.objects.create(name=name, key=key, shard=0, value=1.0, ts=0.0)
        return
    assert rate_limit(name, key=key).ok
    RateLimitState.objects.filter(name=name, key=key).update(ts=F("ts") - aged)


def keys() -> set[str]:
    return set(RateLimitState.objects.values_list("key", flat=True))


def test_the_command_prunes_every_full_row_under_its_keys_config() -> None:
    assert prune_all_full_rows(batch_size=1) == 2
    assert keys() == {"pro-used-recently", "bad"}


def test_a_downgraded_key_is_full_at_its_new_capacity() -> None:
    plans.PLANS["pro-used-recently"] = "free"  # 19 stored, capacity 2 now: full
    assert prune_all_full_rows() == 3
    assert keys() == {"bad"}


def test_the_background_walks_the_keys_a_page_at_a_time() -> None:
    pruned = [prune_full_rows(batch_size=1) for _ in range(4)]
    # broken: "bad" (kept); llm: free-used-long-ago, pro-used-long-ago, pro-used-recently
    assert sum(pruned) == 2
    assert keys() == {"pro-used-recently", "bad"}
    assert prune._KEYED_AFTER["llm"] is None  # the walk starts again from the first key

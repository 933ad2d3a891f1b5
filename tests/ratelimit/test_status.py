"""The read-only view of a limit: RateLimit-* headers from every shard's own share."""

from __future__ import annotations

import pytest

from django_ratequeue import FixedWindow, TokenBucket, rate_limit
from django_ratequeue.ratelimit.status import describe, quota_headers

pytestmark = pytest.mark.django_db

# 10 over 4 shards: shares of 2, 3, 2 and 3.
UNEVEN = FixedWindow(rate=10, period=3600, start=0, shards=4)


def test_an_unused_sharded_limit_has_its_whole_capacity_remaining() -> None:
    headers = quota_headers("uneven", key="ann", config=UNEVEN)
    assert headers == {
        "RateLimit-Limit": "10",
        "RateLimit-Remaining": "10",
        "RateLimit-Reset": "0",
        "RateLimit-Policy": "10;w=3600",
    }


def test_remaining_counts_down_to_zero_over_uneven_shards() -> None:
    admitted = sum(rate_limit("uneven", key="ann", config=UNEVEN).ok for _ in range(40))
    assert admitted == 10
    headers = quota_headers("uneven", key="ann", config=UNEVEN)
    assert headers["RateLimit-Remaining"] == "0"
    assert 0 < int(headers["RateLimit-Reset"]) <= 3600


def test_a_token_bucket_is_full_again_after_the_missing_tokens_refill() -> None:
    limit = TokenBucket(rate=60, period=60, capacity=120)  # a token a second
    rate_limit("burst", count=30, config=limit)
    headers = quota_headers("burst", key=None, config=limit)
    assert headers["RateLimit-Remaining"] == "90"
    assert headers["RateLimit-Reset"] == "30"
    assert headers["RateLimit-Policy"] == "60;w=60;burst=120"


def test_describe_names_the_kind_rate_and_options() -> None:
    assert describe(UNEVEN) == "fixed window: 10 per hour, 4 shards"
    assert describe(None) == "inline config (not in RATE_LIMITS)"

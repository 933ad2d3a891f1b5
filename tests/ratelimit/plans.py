"""Plan tiers for the tests of keyed rate limits: a tenant's plan, and its limit.

``PLANS`` maps a tenant (the limit's key) to its plan; a test changes it as the business
would (an upgrade), and the next decision must see it. ``CALLS`` counts the calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_ratequeue import TokenBucket

TIERS: dict[str, Any] = {
    "free": TokenBucket(rate=2, period=3600),
    "pro": TokenBucket(rate=10, period=3600, capacity=20),
    "reserving": {"kind": "token bucket", "rate": 1, "period": 60, "max_reserved": 1},
    "metered": {"kind": "token bucket", "rate": 100, "period": 60, "max_reserved": 1000},
}
PLANS: dict[str | None, str] = {}
CALLS: list[str | None] = []


def plan_limit(key: str | None) -> TokenBucket | Mapping[str, Any]:
    """Return the limit of ``key``'s plan (free when it has none)."""
    CALLS.append(key)
    return TIERS[PLANS.get(key, "free")]


def broken_limit(key: str | None) -> Any:
    """Raise for the key "bad", return garbage for "garbage", else a free plan's limit."""
    if key == "bad":
        raise LookupError(f"no tenant {key!r}")
    if key == "garbage":
        return {"kind": "token bucket", "rate": float("inf"), "period": 60}
    return TIERS["free"]


NOT_CALLABLE = 42


def tier_by_prefix(key: str | None) -> TokenBucket:
    """Return a fast limit for keys "pro:...", a slow one for the others (no state: for
    the real cluster's processes, which do not share this module's ``PLANS``)."""
    if key is not None and key.startswith("pro:"):
        return TokenBucket(rate=20, period=1, capacity=5)
    return TokenBucket(rate=5, period=1, capacity=2)

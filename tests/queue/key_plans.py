"""A queue's ``key_limits`` function for the tests: the tenants' plans, changed by tests."""

from __future__ import annotations

from typing import Any

# key -> what the function answers for it (missing: None, the defaults).
PLANS: dict[str, Any] = {}
# How many times the function was called, per key.
CALLS: dict[str, int] = {}


def key_limits(key: str) -> Any:
    """Answer what PLANS says of ``key``; raise for the key "boom"."""
    CALLS[key] = CALLS.get(key, 0) + 1
    if key == "boom":
        raise RuntimeError("the plans service is down")
    return PLANS.get(key)


NOT_CALLABLE = 42

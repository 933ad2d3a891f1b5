"""The demo's plans: each user's own limits on the "llm" queue (docs/key-limits.md).

The "Ask the model" page enqueues a user's questions with their concurrency key,
``user:<pk>``: bob is on the "pro" plan, two questions at once and twice the share of
the starts when the queue is busy; everybody else gets the queue's defaults (one at a
time). The admin's *Key limits* overrides this for any key."""

from __future__ import annotations

from django.contrib.auth import get_user_model

PRO = {"max_concurrency": 2, "weight": 2}
PRO_USERS = frozenset({"bob"})


def llm_key_limits(key: str) -> dict[str, int] | None:
    """Return the limits of the user whose concurrency key is ``key`` (None: the defaults)."""
    kind, _, pk = key.partition(":")
    if kind != "user" or not pk.isdigit():
        return None
    users = get_user_model().objects.filter(pk=int(pk))
    return PRO if users.values_list("username", flat=True).first() in PRO_USERS else None

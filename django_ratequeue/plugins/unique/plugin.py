"""How de-duplication joins the engine: ``unique_for`` and ``debounce`` hold a key.

Retention keeps the jobs of live claims, and prunes the claims once expired."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from django_ratequeue.engine import hooks
from django_ratequeue.plugins.unique.claims import live_claims, prune_claims
from django_ratequeue.plugins.unique.policy import check_uniqueness


def claimed_jobs() -> QuerySet[Any]:
    """Return the ids of the jobs that answer a live unique_for window: their handles read."""
    return live_claims().values("job_id")


hooks.add_option_check("unique", check_uniqueness)
hooks.add_kept_jobs("unique", claimed_jobs)
hooks.add_pruning("unique", prune_claims)

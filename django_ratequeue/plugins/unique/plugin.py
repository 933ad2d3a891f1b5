"""How de-duplication joins the enqueue: ``unique_for`` and ``debounce`` hold a key."""

from __future__ import annotations

from django_ratequeue.engine import hooks
from django_ratequeue.plugins.unique.policy import check_uniqueness

hooks.add_option_check("unique", check_uniqueness)

"""Throttling of the HTTP API by the package's own rate limits.

The enqueue endpoints use the scope ``ratequeue_enqueue``, the others ``ratequeue_read``:
a scope is throttled, per user (or client address), when ``RATEQUEUE["RATE_LIMITS"]`` or
DRF's ``DEFAULT_THROTTLE_RATES`` names it, and not otherwise.
"""

from __future__ import annotations

from typing import Any

from rest_framework.settings import api_settings

from ..conf import ratequeue_settings
from ..contrib.drf import RateLimitThrottle


class ApiThrottle(RateLimitThrottle):
    """:class:`RateLimitThrottle` by the view's ``throttle_scope``, off when the scope is
    configured nowhere."""

    def get_limit(self, view: Any) -> tuple[str, str | None] | None:
        scope = self.get_scope(view)
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if scope not in ratequeue_settings().RATE_LIMITS and scope not in rates:
            return None
        return super().get_limit(view)

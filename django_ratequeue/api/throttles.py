"""Throttling of the HTTP API by the package's own rate limits.

The enqueue endpoints use the scope ``ratequeue_enqueue`` (a token per job: a bulk
enqueue draws one per item), the others ``ratequeue_read``; each is throttled per user (or
client address) by ``RATEQUEUE["API_THROTTLES"]``, unless ``RATEQUEUE["RATE_LIMITS"]`` or
DRF's ``DEFAULT_THROTTLE_RATES`` names the scope, which then decides.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.settings import api_settings

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.contrib.drf import RateLimitThrottle
from django_ratequeue.decorators import add_quota_headers
from django_ratequeue.ratelimit.config import RateLimitConfig
from django_ratequeue.ratelimit.decisions import rate_limit


class ApiThrottle(RateLimitThrottle):
    """Throttle by the view's ``throttle_scope``, as :class:`RateLimitThrottle` does.

    The scope's limit where the project configures it, else ``API_THROTTLES``' (off when
    that is None)."""

    def get_limit(self, view: Any) -> tuple[str, str | None] | None:
        scope = self.get_scope(view)
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if scope in ratequeue_settings().RATE_LIMITS or scope in rates:
            return super().get_limit(view)
        return None

    def default_config(self, view: Any) -> RateLimitConfig | None:
        """Return ``API_THROTTLES``' bucket for the view's scope (``ratequeue_<name>``)."""
        scope = (self.get_scope(view) or "").removeprefix("ratequeue_")
        return ratequeue_settings().API_THROTTLES.get(scope)

    def draws(self, view: Any) -> bool:
        """Return whether the view's requests draw from a limit (the throttle is on)."""
        return self.get_limit(view) is not None or self.default_config(view) is not None

    def allow_request(self, request: Request, view: Any) -> bool:
        """Draw the view's ``throttle_count(request)`` tokens (one by default)."""
        if self.get_limit(view) is not None:
            return super().allow_request(request, view)
        self.result = None
        config = self.default_config(view)
        key = None if config is None else self.get_cache_key(request, view)
        if config is None or key is None:
            return True
        count_of = getattr(view, "throttle_count", None)
        count = count_of(request) if count_of is not None else 1
        try:
            self.result = rate_limit(str(view.throttle_scope), key=key, count=count, config=config)
        except ValueError as error:  # more jobs than the bucket could ever admit at once
            raise ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [str(error)]}) from None
        headers: Any = getattr(view, "headers", None)
        if isinstance(headers, dict):
            add_quota_headers(headers, str(view.throttle_scope), key=key, config=config)
        return self.result.ok

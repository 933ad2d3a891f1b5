"""Django REST framework throttles backed by the database rate limits.

Configured by ``scope`` like DRF's own throttles. The scope names a limit: first in
``RATEQUEUE["RATE_LIMITS"]`` (any kind, shards and all), else in DRF's
``DEFAULT_THROTTLE_RATES`` as ``"<n>/<period>"`` (``s``, ``m``, ``h`` or ``d``, as DRF
reads it), which becomes a token bucket of ``n`` per period, the continuous counterpart
of DRF's sliding log. A rate of ``None`` turns the throttle off, as in DRF.

Unlike cache-based throttles, concurrent requests cannot over-admit: each decision is a
row-locked transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.core.exceptions import ImproperlyConfigured
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from ..conf import ratequeue_settings
from ..ratelimit.api import RateLimitResult, rate_limit
from ..ratelimit.config import TokenBucket

if TYPE_CHECKING:  # rest_framework.views imports DEFAULT_THROTTLE_CLASSES, i.e. this module
    from rest_framework.request import Request
    from rest_framework.views import APIView

DRF_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_drf_rate(rate: str) -> TokenBucket:
    """``"100/hour"`` -> ``TokenBucket(rate=100, period=3600)``."""
    count, _, period = rate.partition("/")
    if not count.strip().isdigit() or int(count) < 1 or period[:1] not in DRF_PERIODS:
        raise ImproperlyConfigured(
            f"Throttle rate {rate!r} is not of the form '<requests>/<period>' "
            "with a period of second, minute, hour or day, e.g. '100/hour'."
        )
    return TokenBucket(rate=int(count), period=DRF_PERIODS[period[0]])


class RateLimitThrottle(BaseThrottle):
    """Throttle by the limit named ``scope``, per user (authenticated) or client IP.

    Without a ``scope`` on the class, the view's ``throttle_scope`` is used (like DRF's
    ``ScopedRateThrottle``), and views without one are not throttled. The address is
    DRF's ``get_ident``: set ``NUM_PROXIES`` so that a forged ``X-Forwarded-For`` is not
    trusted. Override :meth:`get_key` to limit by something else; ``None`` skips the request.
    """

    scope: str | None = None

    def __init__(self) -> None:
        self.result: RateLimitResult | None = None

    def get_scope(self, view: APIView) -> str | None:
        return self.scope or getattr(view, "throttle_scope", None)

    def get_key(self, request: Request, view: APIView) -> str | None:
        if request.user and request.user.is_authenticated:
            return f"user:{request.user.pk}"
        return f"ip:{self.get_ident(request)}"

    def get_drf_rate(self, scope: str) -> str | None:
        """The rate DRF's ``DEFAULT_THROTTLE_RATES`` gives ``scope`` (``None``: off)."""
        try:
            rate = cast("str | None", api_settings.DEFAULT_THROTTLE_RATES[scope])
        except KeyError:
            raise ImproperlyConfigured(
                f"No rate limit for throttle scope {scope!r}: add it to "
                "RATEQUEUE['RATE_LIMITS'] or REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']."
            ) from None
        return rate

    def allow_request(self, request: Request, view: APIView) -> bool:
        self.result = None
        scope = self.get_scope(view)
        key = None if scope is None else self.get_key(request, view)
        if scope is None or key is None:
            return True
        config: TokenBucket | None = None  # from RATE_LIMITS: the engine reads it
        if scope not in ratequeue_settings()["RATE_LIMITS"]:
            rate = self.get_drf_rate(scope)
            if rate is None:
                return True
            config = parse_drf_rate(rate)
        self.result = rate_limit(scope, key=key, config=config)
        return self.result.ok

    def wait(self) -> float | None:
        """Seconds until the refused request could succeed; DRF sends it as Retry-After."""
        return self.result.retry_after if self.result else None


class UserRateLimitThrottle(RateLimitThrottle):
    """Like DRF's ``UserRateThrottle``: scope ``"user"``, per user, anonymous per IP."""

    scope = "user"


class AnonRateLimitThrottle(RateLimitThrottle):
    """Like DRF's ``AnonRateThrottle``: scope ``"anon"``, anonymous requests only, per IP."""

    scope = "anon"

    def get_key(self, request: Request, view: APIView) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return f"ip:{self.get_ident(request)}"

"""Django REST framework throttles backed by the database rate limits.

A drop-in for DRF's throttles: a class's ``rate`` wins, else its scope names the limit
(in ``THROTTLE_RATES``, ``RATEQUEUE["RATE_LIMITS"]`` or DRF's ``DEFAULT_THROTTLE_RATES``).
A DRF rate string becomes a token bucket of ``n`` per period, not DRF's sliding log
(``strict = True``: never more than ``n`` in any period). Each decision is a row-locked
transaction. docs/api.md ("DRF throttles") tells how they differ from DRF's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from django.core.exceptions import ImproperlyConfigured

try:
    from rest_framework.settings import api_settings
    from rest_framework.throttling import BaseThrottle
except ImportError as exc:  # an extra: pip install django-ratequeue[drf]
    raise ImproperlyConfigured(
        "django_ratequeue.contrib.drf needs Django REST framework: "
        "pip install 'django-ratequeue[drf]'."
    ) from exc

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.decorators import add_quota_headers, address_identity
from django_ratequeue.ratelimit.config import TokenBucket
from django_ratequeue.ratelimit.decisions import RateLimitResult, rate_limit

if TYPE_CHECKING:  # rest_framework.views imports DEFAULT_THROTTLE_CLASSES, i.e. this module
    from rest_framework.request import Request
    from rest_framework.views import APIView

DRF_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_drf_rate(rate: str, *, strict: bool = False, burst: int = 1) -> TokenBucket:
    """Parse a DRF rate string: ``"100/hour"`` -> ``TokenBucket(rate=100, period=3600)``.

    With ``strict=True`` the bucket never admits more than ``n`` requests in any window
    of one period: it holds ``burst`` tokens (requests that may come at once, 1 to ``n``)
    and refills ``n - burst + 1`` per period. Any ``k`` requests admitted within less
    than a period drew at most ``burst`` stored tokens plus less than ``n - burst + 1``
    refilled ones, so ``k < n + 1``. ``burst=1`` keeps the sustained rate at ``n`` and
    spaces requests ``period / n`` apart; ``burst=n`` allows all ``n`` at once, then one
    per period.
    """
    count, _, period = rate.partition("/") if isinstance(rate, str) else ("", "", "")
    if not count.strip().isdigit() or int(count) < 1 or period[:1] not in DRF_PERIODS:
        raise ImproperlyConfigured(
            f"Throttle rate {rate!r} is not of the form '<requests>/<period>' "
            "with a period of second, minute, hour or day, e.g. '100/hour'."
        )
    n, seconds = int(count), DRF_PERIODS[period[0]]
    if not strict:
        return TokenBucket(rate=n, period=seconds)
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= n:
        raise ImproperlyConfigured(
            f"A strict throttle's burst must be a whole number from 1 to {n} for {rate!r}, "
            f"not {burst!r}."
        )
    return TokenBucket(rate=n - burst + 1, period=seconds, capacity=burst)


class RateLimitThrottle(BaseThrottle):
    """Throttle per user (authenticated) or client address, by ``rate`` or by scope.

    Without a ``scope`` on the class, the view's ``throttle_scope`` is used (like DRF's
    ``ScopedRateThrottle``); without either, and without a ``rate``, the view is not
    throttled. Override :meth:`get_key` (or DRF's :meth:`get_cache_key`, in a throttle
    ported from DRF) to limit by something else; ``None`` skips the request.
    """

    scope: str | None = None
    #: ``"<n>/<period>"``; when set it wins over every setting, as in DRF.
    rate: str | None = None
    #: Rates by scope for this class alone; ``None``: the settings (read at each request).
    THROTTLE_RATES: ClassVar[Mapping[str, str | None] | None] = None
    #: Read DRF rate strings as "never more than n in any period" (see parse_drf_rate).
    strict: bool = False
    burst: int = 1

    def __init__(self) -> None:
        self.result: RateLimitResult | None = None

    def get_scope(self, view: APIView) -> str | None:
        return self.scope or getattr(view, "throttle_scope", None)

    def get_ident(self, request: Request) -> str:
        """Return the client's address: ``REMOTE_ADDR``, or as DRF's ``NUM_PROXIES`` says.

        With ``NUM_PROXIES`` set to n, it is the address the n-th proxy from us saw in
        ``X-Forwarded-For``.

        Unlike DRF, an unset ``NUM_PROXIES`` trusts no ``X-Forwarded-For`` at all: a client
        that forges a new one for each request would otherwise never be throttled.
        """
        remote_addr = str(request.META.get("REMOTE_ADDR") or "")
        num_proxies = api_settings.NUM_PROXIES
        forwarded_for = request.headers.get("x-forwarded-for")
        if not num_proxies or forwarded_for is None:
            return remote_addr
        addresses = forwarded_for.split(",")
        return addresses[-min(num_proxies, len(addresses))].strip()

    def get_key(self, request: Request, view: APIView) -> str | None:
        if request.user and request.user.is_authenticated:
            return f"user:{request.user.pk}"
        return f"ip:{address_identity(self.get_ident(request)) or ''}"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        """Return the request's key as :meth:`get_key` does, under DRF's name for it.

        A throttle ported from DRF that overrides it keeps its keys, and its ``None`` still
        skips the request."""
        return self.get_key(request, view)

    def get_limit(self, view: APIView) -> tuple[str, str | None] | None:
        """Return the limit's name and DRF rate string, or ``None`` for no throttling.

        The rate string is ``None`` when the limit is the one in
        ``RATEQUEUE["RATE_LIMITS"]``. The rate is parsed only for a request that has a key
        (:meth:`allow_request`)."""
        scope = self.get_scope(view)
        if self.rate:
            return scope or self.default_name(), self.rate
        if not scope:
            return None
        if self.THROTTLE_RATES is None and scope in ratequeue_settings().RATE_LIMITS:
            return scope, None
        rate = self.get_rate(scope)
        return None if rate is None else (scope, rate)

    @classmethod
    def names_limit(cls, scope: str) -> bool:
        """Say whether ``scope`` names a limit this class finds (:meth:`get_limit`'s places).

        The start-up checks ask it of each throttle a view uses."""
        if cls.THROTTLE_RATES is not None:
            return scope in cls.THROTTLE_RATES
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        return scope in ratequeue_settings().RATE_LIMITS or scope in rates

    def default_name(self) -> str:
        """Return the name of the limit of a class with a ``rate`` and no scope: the class's."""
        return f"{type(self).__module__}.{type(self).__qualname__}"[-200:]

    def get_rate(self, scope: str) -> str | None:
        """Return the DRF rate string for ``scope`` (``None``: the throttle is off)."""
        rates = self.THROTTLE_RATES
        if rates is None:
            rates = cast("Mapping[str, str | None]", api_settings.DEFAULT_THROTTLE_RATES)
        try:
            return rates[scope]
        except KeyError:
            where = (
                f"{type(self).__name__}.THROTTLE_RATES"
                if self.THROTTLE_RATES is not None
                else "RATEQUEUE['RATE_LIMITS'] or REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']"
            )
            raise ImproperlyConfigured(
                f"No rate limit for throttle scope {scope!r}: add it to {where}."
            ) from None

    def parse_rate(self, rate: str) -> TokenBucket:
        return parse_drf_rate(rate, strict=self.strict, burst=self.burst)

    def allow_request(self, request: Request, view: APIView) -> bool:
        """Consume one token for the request's key, in DRF's order.

        A throttle that is off allows the request before any key is computed, and a
        request without a key before the rate is parsed."""
        self.result = None
        limit = self.get_limit(view)
        if limit is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        name, rate = limit
        config = None if rate is None else self.parse_rate(rate)
        self.result = rate_limit(name, key=key, config=config)
        headers: Any = getattr(view, "headers", None)
        if isinstance(headers, dict):  # APIView sends these with whatever it answers
            add_quota_headers(headers, name, key=key, config=config)
        return self.result.ok

    def wait(self) -> float | None:
        """Return the seconds until the refused request could succeed (DRF's Retry-After)."""
        return self.result.retry_after if self.result else None


class UserRateLimitThrottle(RateLimitThrottle):
    """Throttle like DRF's ``UserRateThrottle``: scope ``"user"``, per user, anonymous per IP."""

    scope = "user"


class AnonRateLimitThrottle(RateLimitThrottle):
    """Throttle like DRF's ``AnonRateThrottle``: scope ``"anon"``, anonymous requests per IP."""

    scope = "anon"

    def get_key(self, request: Request, view: APIView) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return super().get_key(request, view)

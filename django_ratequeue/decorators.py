"""The ``@ratelimit`` view decorator: HTTP 429 from the database-backed rate limits.

Keys say *who* is limited: ``None`` (everybody), ``"ip"`` (``REMOTE_ADDR`` only, never the
forgeable ``X-Forwarded-For``), ``"user"`` (authenticated: put ``@login_required``
outside), ``"user_or_ip"``, ``"header:<name>"``, or a callable. A refusal carries
``Retry-After``, and every response the IETF draft ``RateLimit-*`` headers
(:func:`.ratelimit.status.quota_headers`). docs/api.md ("View decorator") tells the rest.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import weakref
from collections.abc import Callable, Collection, Mapping, MutableMapping
from contextlib import suppress
from dataclasses import dataclass
from functools import partial, wraps
from inspect import iscoroutinefunction
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.http.response import ResponseHeaders
from django.utils.decorators import method_decorator
from django.utils.module_loading import import_string

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.exceptions import RateLimited
from django_ratequeue.ratelimit.decisions import check_rate_limit, rate_limit, reset_rate_limit
from django_ratequeue.ratelimit.status import quota_headers

KeyFunc = Callable[[HttpRequest], str | None]
ResponsePredicate = Callable[[HttpRequest, HttpResponse], bool]
LimitedView = Callable[[HttpRequest, RateLimited], HttpResponse]
ViewOrClass = TypeVar("ViewOrClass", bound=Callable[..., Any])

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"})
# Header values longer than this are hashed so that the key fits the key column.
MAX_KEY_LENGTH = 200
# The views @ratelimit limits by a name RATEQUEUE["RATE_LIMITS"] must define (no config),
# with those names: the start-up checks look the URLconf's views up here.
_NAMED: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def limit_names(view: Any) -> list[str]:
    """Return the names of the settings' limits ``@ratelimit`` put on ``view``.

    On it, on its class (``as_view()``), or on a view it wraps (``functools.wraps``)."""
    names: list[str] = []
    for start in (view, getattr(view, "view_class", None)):
        candidate, depth = start, 0
        while candidate is not None and depth < 100:
            with suppress(TypeError):  # not weakly referable: nothing was recorded on it
                names += _NAMED.get(candidate, [])
            candidate, depth = getattr(candidate, "__wrapped__", None), depth + 1
    return names


def response_failed(request: HttpRequest, response: HttpResponse) -> bool:
    """Return whether the view answered with a client or server error (for ``count_if``)."""
    return response.status_code >= 400


def response_succeeded(request: HttpRequest, response: HttpResponse) -> bool:
    """Return whether the view answered with a success or a redirect (for ``reset_if``)."""
    return response.status_code < 400


def ratelimit(
    name: str,
    key: str | KeyFunc | None = None,
    *,
    count: int = 1,
    methods: Collection[str] | None = None,
    count_if: ResponsePredicate | None = None,
    reset_if: ResponsePredicate | None = None,
    limited_view: LimitedView | str | None = None,
    config: Any = None,
) -> Callable[[ViewOrClass], ViewOrClass]:
    """Limit a function view, a view method or a class-based view by the limit ``name``.

    ``count`` tokens per request, before the view runs, for the ``methods`` given (all
    when ``None``); with ``count_if``, only when ``count_if(request, response)`` is true,
    afterwards; ``reset_if`` forgets them. A refused request gets ``limited_view``, else
    ``RATEQUEUE["RATE_LIMITED_VIEW"]``, else a plain-text 429. ``config`` gives the limit
    inline. The documentation's API reference tells the rest, and warns about logins.
    """
    limit = ViewRateLimit(
        name=name,
        key_func=_key_func(key),
        count=_positive_count(count),
        methods=_methods(methods),
        count_if=count_if,
        reset_if=reset_if,
        limited_view=limited_view,
        config=config,
    )

    def decorator(view: ViewOrClass) -> ViewOrClass:
        if config is None:
            _record(name, view)
        if isinstance(view, type):
            return method_decorator(decorator, name="dispatch")(view)
        if iscoroutinefunction(view):
            return limit.wrap_async(view)  # type: ignore[return-value]
        return limit.wrap(view)  # type: ignore[return-value]

    return decorator


def _record(name: str, view: Any) -> None:
    """Record that ``view`` uses the limit ``name`` of the settings (:func:`limit_names`).

    A class-based view is recorded as its class: method_decorator then applies the
    decorator again to stand-ins of its ``dispatch`` (one at once, one per request)."""
    if isinstance(view, partial) or getattr(view, "__module__", None) == "django.utils.decorators":
        return
    with suppress(TypeError):  # a callable object that cannot be weakly referred to
        _NAMED.setdefault(view, []).append(name)


@dataclass(frozen=True)
class ViewRateLimit:
    """Apply one ``@ratelimit``: decide, call the view, settle and add headers."""

    name: str
    key_func: KeyFunc | None
    count: int
    methods: frozenset[str] | None
    count_if: ResponsePredicate | None
    reset_if: ResponsePredicate | None
    limited_view: LimitedView | str | None
    config: Any

    def wrap(self, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            admission = self.admit(request)
            if admission is None:
                return view(request, *args, **kwargs)
            key, refusal = admission
            return refusal or self.settle(request, key, view(request, *args, **kwargs))

        return limited

    def wrap_async(self, view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        async def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            # Keys may read request.user, a query: everything but the view runs in a thread.
            admission = await sync_to_async(self.admit)(request)
            if admission is None:
                return await view(request, *args, **kwargs)
            key, refusal = admission
            if refusal is not None:
                return refusal
            response = await view(request, *args, **kwargs)
            return await sync_to_async(self.settle)(request, key, response)

        return limited

    def admit(self, request: HttpRequest) -> tuple[str | None, HttpResponse | None] | None:
        """Consume (or, with ``count_if``, only check) for this request's key.

        Return ``None`` when the limit does not apply (another method, or the key callable
        returned ``None``); else the key and the 429 response if the request is refused.
        """
        if self.methods is not None and request.method not in self.methods:
            return None
        key = self.key_func(request) if self.key_func else None
        if self.key_func and key is None:
            return None
        decide = check_rate_limit if self.count_if else rate_limit
        result = decide(self.name, key=key, count=self.count, config=self.config)
        if result.ok:
            return key, None
        response = self.refuse(request, RateLimited(self.name, key, result.retry_at))
        if result.retry_after is not None:
            response.headers.setdefault("Retry-After", str(math.ceil(result.retry_after)))
        return key, self.with_headers(response, key)

    def settle(
        self, request: HttpRequest, key: str | None, response: HttpResponse
    ) -> HttpResponse:
        """Count the response if ``count_if`` says so, reset if ``reset_if`` says so."""
        if self.count_if and self.count_if(request, response):
            rate_limit(self.name, key=key, count=self.count, config=self.config)
        if self.reset_if and self.reset_if(request, response):
            reset_rate_limit(self.name, key=key)
        return self.with_headers(response, key)

    def refuse(self, request: HttpRequest, exception: RateLimited) -> HttpResponse:
        view = self.limited_view or ratequeue_settings().RATE_LIMITED_VIEW
        if isinstance(view, str):
            view = import_string(view)
        return view(request, exception) if view else too_many_requests(request, exception)

    def with_headers(self, response: HttpResponse, key: str | None) -> HttpResponse:
        add_quota_headers(response.headers, self.name, key=key, config=self.config)
        return response


def add_quota_headers(
    headers: MutableMapping[str, str] | ResponseHeaders,
    name: str,
    *,
    key: str | None,
    config: Any = None,
) -> None:
    """Set the ``RateLimit-*`` headers of the limit ``name`` for ``key`` in ``headers``.

    Headers that already hold another limit's with less left stay: the tightest one
    shows."""
    quota = quota_headers(name, key=key, config=config)
    other = headers.get("RateLimit-Remaining")
    if quota and (other is None or int(other) > int(quota["RateLimit-Remaining"])):
        for header, value in quota.items():
            headers[header] = value


def too_many_requests(request: HttpRequest, exception: RateLimited) -> HttpResponse:
    """Return the default response to a refused request: a short plain-text 429."""
    return HttpResponse(
        f"Too many requests: {exception}.\n", status=429, content_type="text/plain; charset=utf-8"
    )


def client_ip(request: HttpRequest) -> str | None:
    """Return ``REMOTE_ADDR`` as :func:`address_identity` keys it."""
    return address_identity(request.META.get("REMOTE_ADDR"))


def address_identity(address: str | None) -> str | None:
    """Return the part of a client address that identifies one client, for a rate-limit key.

    IPv4 as it is, also when written IPv4-mapped (``::ffff:1.2.3.4``, as dual-stack
    servers report IPv4 clients), so that it is not taken for an IPv6 /64 that every IPv4
    client would share; other IPv6 addresses per /64 network, the block one subscriber
    usually holds. A port some proxies append (``1.2.3.4:5678``, ``[2001:db8::1]:443``)
    is dropped: the client picks it. Anything else (a unix-socket server's placeholder) is
    kept as it is, hashed when longer than ``MAX_KEY_LENGTH`` so that it fits the key column.
    """
    if not address:
        return None
    try:
        ip = ipaddress.ip_address(_without_port(address))
    except ValueError:
        return hashed_if_long(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip), 64), strict=False))
    return str(ip)


def _without_port(address: str) -> str:
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not host:
        return address
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host if host.count(":") == 0 else address  # a bare IPv6 address has colons


def hashed_if_long(value: str) -> str:
    """Return ``value``, or its SHA-256 when longer than ``MAX_KEY_LENGTH``."""
    if len(value) <= MAX_KEY_LENGTH:
        return value
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def ip_key(request: HttpRequest) -> str | None:
    ip = client_ip(request)
    return f"ip:{ip}" if ip else None


def user_key(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise ImproperlyConfigured(
            "A rate limit keyed by 'user' got an anonymous request: require login before "
            "it (put @login_required above @ratelimit) or use key='user_or_ip'."
        )
    return f"user:{user.pk}"


def user_or_ip_key(request: HttpRequest) -> str | None:
    user = getattr(request, "user", None)
    return user_key(request) if user is not None and user.is_authenticated else ip_key(request)


def header_key(header: str) -> KeyFunc:
    """Return the key function that keys a request by its ``header``.

    Requests without the header share the key ``header:``."""

    def key(request: HttpRequest) -> str:
        return f"header:{hashed_if_long(request.headers.get(header, ''))}"

    return key


KEY_SHORTHANDS: Mapping[str, KeyFunc] = {
    "ip": ip_key,
    "user": user_key,
    "user_or_ip": user_or_ip_key,
}


def _key_func(key: str | KeyFunc | None) -> KeyFunc | None:
    if key is None or callable(key):
        return key
    if isinstance(key, str) and key in KEY_SHORTHANDS:
        return KEY_SHORTHANDS[key]
    if isinstance(key, str) and key.startswith("header:") and key.removeprefix("header:"):
        return header_key(key.removeprefix("header:"))
    raise ValueError(
        f"Unknown rate-limit key {key!r}: use None (one limit for all requests), "
        "'ip', 'user', 'user_or_ip', 'header:<Header-Name>' or a callable (request) -> str."
    )


def _positive_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, not {count!r}.")
    return count


def _methods(methods: Collection[str] | None) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, str):
        methods = [methods]
    normalised = frozenset(method.upper() for method in methods)
    unknown = sorted(normalised - HTTP_METHODS)
    if unknown or not normalised:
        raise ValueError(
            f"methods must name HTTP methods ({', '.join(sorted(HTTP_METHODS))}); "
            f"got {sorted(methods)!r}."
        )
    return normalised

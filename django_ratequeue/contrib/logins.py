"""A failed-login limit that works with Django's own ``LoginView`` (or any login view).

``LoginView`` answers a failed login with 200 and the form again, so a limit that judges
the response counts nothing there and resets on every failure. :func:`protect_login`
takes a token for each POST's (username, client address) pair before the view runs, and
Django's ``user_logged_in`` signal forgets that pair's attempts. docs/api.md ("Failed
logins") tells why the pair.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest

from django_ratequeue.decorators import (
    LimitedView,
    ViewOrClass,
    address_identity,
    hashed_if_long,
    ratelimit,
)
from django_ratequeue.ratelimit.decisions import reset_rate_limit

# The (limit name, key) pairs a request was counted under, for the user_logged_in receiver.
_COUNTED = "_ratequeue_login_attempts"


def login_key(request: HttpRequest, username_field: str = "username") -> str:
    """Return the request's key: ``ip:<address>|username:<name>``.

    The posted username as login compares it (NFKC, and case-folded so that ``Alice`` and
    ``alice`` count together), with the client address as the decorator's ``"ip"`` key has
    it; hashed when too long for the key."""
    username = unicodedata.normalize("NFKC", request.POST.get(username_field, "")).casefold()
    address = address_identity(request.META.get("REMOTE_ADDR")) or ""
    return hashed_if_long(f"ip:{address}|username:{username}")


def protect_login(
    name: str,
    *,
    config: Any = None,
    username_field: str = "username",
    limited_view: LimitedView | str | None = None,
) -> Callable[[ViewOrClass], ViewOrClass]:
    """Limit login attempts per username and client address by the limit ``name``.

    Wrap the login view: ``path("login/", protect_login("failed_logins")(LoginView.as_view()))``.
    Each POST consumes a token; a refused one gets ``limited_view`` (or the decorator's
    default 429 with ``Retry-After``) and never reaches authentication. When that user
    logs in, the pair's limit is reset. ``config`` and ``limited_view`` are the
    decorator's; ``username_field`` is the form field holding the username.
    """
    if not isinstance(username_field, str) or not username_field:
        raise ValueError(f"username_field must name a form field, not {username_field!r}.")

    def key(request: HttpRequest) -> str:
        counted = login_key(request, username_field)
        counts: list[tuple[str, str]] = getattr(request, _COUNTED, [])
        setattr(request, _COUNTED, [*counts, (name, counted)])
        return counted

    return ratelimit(name, key=key, methods=["POST"], config=config, limited_view=limited_view)


@receiver(user_logged_in)
def _forget_attempts(sender: Any, request: HttpRequest | None, **kwargs: Any) -> None:
    """Forget the attempts counted for this request's pair: its login succeeded."""
    for name, key in getattr(request, _COUNTED, ()):
        reset_rate_limit(name, key=key)

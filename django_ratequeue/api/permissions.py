"""Who may use the HTTP API, and whose jobs a request sees.

A logged-in user owns the jobs they enqueue (the handle's ``owner``, see docs/api.md,
"Owners"); with ``RATEQUEUE["API_ALLOW_ANONYMOUS"]`` a visitor who is not logged in owns
theirs through their session. Every other job looks exactly like one that does not
exist.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.jobs import find_key, owner_label
from django_ratequeue.models import WorkerKey


class ApiAccess(BasePermission):
    """Admit authenticated users, and anonymous visitors when ``API_ALLOW_ANONYMOUS`` is set.

    The writes of anonymous visitors have CSRF checked as DRF checks it for logged-in
    session users."""

    message = "Log in to use this API."

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.user and request.user.is_authenticated:
            return True
        if not ratequeue_settings().API_ALLOW_ANONYMOUS:
            return False
        if request.method not in SAFE_METHODS:
            CsrfCheck().enforce_csrf(request)
        return True


class SchemaAccess(ApiAccess):
    """Admit whoever may use the API (:class:`ApiAccess`), and remote workers with their key.

    The schema, worker endpoints included, is not shown to anybody else."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, WorkerKey) or super().has_permission(request, view)


class WorkerKeyAuth(BaseAuthentication):
    """Authenticate ``Authorization: Api-Key <key>``: a worker key not revoked.

    The key is a :class:`~..queue.models.WorkerKey`."""

    keyword = "Api-Key"

    def authenticate(self, request: Request) -> tuple[AnonymousUser, WorkerKey] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        keyword, _space, key = header.partition(" ")
        if keyword != self.keyword:
            return None
        row = find_key(key.strip())
        if row is None:
            raise AuthenticationFailed("Unknown worker key.")
        if row.revoked_at is not None:
            raise AuthenticationFailed("This worker key was revoked.")
        return AnonymousUser(), row

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class CsrfCheck(SessionAuthentication):
    """Check CSRF on the writes of anonymous visitors, as DRF does on session requests.

    DRF checks only logged-in users' requests, but an anonymous session owns jobs here
    too."""


def request_owner(request: Request, *, create: bool) -> str | None:
    """Return the owner (as stored) of the request's jobs: its user, else its session.

    A session owns as ``session:<key>``. Return ``None`` when the request has no
    identity yet and ``create`` is false (it can own nothing); with ``create`` an
    anonymous visitor's session is saved to get one."""
    user = request.user
    if user and user.is_authenticated:
        return owner_label(user)
    session = getattr(request, "session", None)
    if session is None:
        raise PermissionDenied(
            "Anonymous use of this API needs Django's sessions (SessionMiddleware)."
        )
    if session.session_key is None:
        if not create:
            return None
        session.save()
    return f"session:{session.session_key}"

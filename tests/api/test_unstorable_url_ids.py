"""An id in a URL path that no database can store (a NUL, a lone surrogate) names nothing:
a 404 on the HTTP API and in the admin, never a 500 (issue 31).

A NUL arrives percent-encoded (``%00``); a lone surrogate cannot come through a test
client's URL, so those views are called as the URL resolver calls them, with the part as
an ASGI server may decode it (``surrogateescape``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory
from django.urls import resolve
from rest_framework.test import APIClient, APIRequestFactory, force_authenticate

from tests.api.conftest import API

pytestmark = pytest.mark.django_db

UNSTORABLE = ["\x00", "a\x00b", "\udce9", "job-\ud800"]
API_PATHS = [
    ("get", "jobs/{}/"),
    ("post", "jobs/{}/cancel/"),
    ("get", "jobs/{}/events/"),
    ("get", "batches/{}/"),
    ("post", "batches/{}/cancel/"),
    ("get", "batches/{}/events/"),
]
ADMIN = "/admin/django_ratequeue/"
ADMIN_PATHS = [
    ("get", "job/{}/change/"),
    ("get", "job/{}/history/"),
    ("get", "job/{}/live/"),
    ("post", "job/{}/cancel/"),
    ("post", "job/{}/retry/"),
    ("get", "batch/{}/change/"),
    ("get", "schedule/{}/change/"),
]


def called(resolved_path: str, part: str, method: str, user: User, api: bool) -> Any:
    """Call the view of ``resolved_path`` with its one path part replaced by ``part``."""
    match = resolve(resolved_path)
    name = next(iter(match.kwargs))
    request = getattr(APIRequestFactory() if api else RequestFactory(), method)(resolved_path)
    if api:
        force_authenticate(request, user=user)
    else:
        request.user = user
        request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
    return match.func(request, *match.args, **{**match.kwargs, name: part})


@pytest.mark.parametrize(("method", "path"), API_PATHS)
def test_the_api_answers_404_to_a_nul_in_an_id(api: APIClient, method: str, path: str) -> None:
    response = getattr(api, method)(API + path.format("%00"))
    assert response.status_code == 404, response.content


@pytest.mark.parametrize(("method", "path"), API_PATHS)
@pytest.mark.parametrize("part", UNSTORABLE)
def test_the_api_answers_404_to_any_unstorable_id(
    ada: User, method: str, path: str, part: str
) -> None:
    response = called(API + path.format("x"), part, method, ada, api=True)
    assert response.status_code == 404


@pytest.mark.parametrize(("method", "path"), ADMIN_PATHS)
def test_the_admin_answers_404_to_a_nul_in_an_id(
    admin_client: Client, method: str, path: str
) -> None:
    response = getattr(admin_client, method)(ADMIN + path.format("%00"))
    assert response.status_code == 404


@pytest.mark.parametrize(("method", "path"), ADMIN_PATHS)
@pytest.mark.parametrize("part", UNSTORABLE)
def test_the_admin_answers_404_to_any_unstorable_id(
    admin_user: User, method: str, path: str, part: str
) -> None:
    from django.http import Http404

    with pytest.raises(Http404):
        called(ADMIN + path.format("x"), part, method, admin_user, api=False)

"""Clients of the HTTP API, as the users who own (or do not own) jobs."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

API = "/ratequeue/"


@pytest.fixture
def ada(db: None) -> User:
    return User.objects.create_user("ada", password="secret")


@pytest.fixture
def bob(db: None) -> User:
    return User.objects.create_user("bob", password="secret")


def logged_in(user: User) -> APIClient:
    """A client with a real session cookie (DRF's session authentication, CSRF checked)."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/admin/login/")  # a csrftoken cookie, as a page of the site would set
    client.credentials(HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)
    return client


@pytest.fixture
def api(ada: User) -> APIClient:
    return logged_in(ada)


@pytest.fixture
def other(bob: User) -> APIClient:
    return logged_in(bob)


def enqueue(client: APIClient, function: str, **body: Any) -> Any:
    return client.post(f"{API}jobs/", {"function": function, **body}, format="json")

"""The example project served for real (issue 36): ``check --deploy`` clean but for what
needs HTTPS, JSON for the API's 500s, which are logged with DEBUG off too."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from django.test import RequestFactory

from example_project.urls import server_error
from tests.cluster import ROOT

HTTPS_ONLY = {"security.W004", "security.W008", "security.W012", "security.W016"}


def deploy_check(**env: str) -> set[str]:
    """Return the ids of the problems ``check --deploy`` finds in the example project."""
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "k" * 20 + "Zq8#x!vR2@pL5$mN7^bT9&cW1*dY3(fH",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return {word.strip("():") for word in done.stderr.split() if word.startswith("(security.")}


@pytest.mark.parametrize(("https", "left"), [("0", HTTPS_ONLY), ("1", set())])
def test_the_example_passes_the_deploy_check_but_for_https(https: str, left: set[str]) -> None:
    assert deploy_check(DJANGO_HTTPS=https) == left


def test_an_api_server_error_is_json_and_logged() -> None:
    response = server_error(RequestFactory().get("/ratequeue/jobs/"))
    assert response.status_code == 500
    assert "server's log" in json.loads(response.content)["detail"]
    assert server_error(RequestFactory().get("/admin/"))["Content-Type"].startswith("text/html")
    request_log = logging.getLogger("django.request")
    assert request_log.getEffectiveLevel() == logging.ERROR
    handlers = logging.getLogger("django").handlers
    assert handlers and not any(handler.filters for handler in handlers)  # DEBUG off too

"""Before Django 6.0 the backend's module imports, but the backend says it needs 6.0."""

from __future__ import annotations

import django
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_ratequeue.backends import BACKEND_PATH, RateQueueBackend, check_django_version

pytestmark = pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django 6.0+ has django.tasks")


def test_the_backend_says_it_needs_django_6() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"needs Django 6\.0 or later"):
        RateQueueBackend("default", {})


def test_a_system_check_names_the_tasks_entries_that_use_it() -> None:
    tasks = {
        "default": {"BACKEND": BACKEND_PATH},
        "other": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    with override_settings(TASKS=tasks):
        errors = check_django_version()
    assert [(e.id, e.msg) for e in errors] == [
        (
            "django_ratequeue.E301",
            f"TASKS['default'] uses {BACKEND_PATH}, which needs Django 6.0 or later.",
        )
    ]


def test_no_tasks_setting_no_error() -> None:
    assert check_django_version() == []

"""Where the admin's lists sit: django-q2's task lists hidden, internal tables off the index.

django-q2 registers four lists of its own tasks (Successful, Failed, Scheduled and Queued
tasks); ratequeue's jobs never appear in them, so beside its own Failed jobs and Schedules
they only confuse. They are unregistered unless ``RATEQUEUE["DJANGO_Q_ADMIN"]`` is True.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from django_ratequeue.conf import ratequeue_settings


def hide_django_q_admin(site: admin.AdminSite = admin.site) -> None:
    """Unregister django-q2's task lists from ``site`` unless DJANGO_Q_ADMIN is True."""
    try:
        shown = ratequeue_settings().DJANGO_Q_ADMIN
    except ImproperlyConfigured:  # the system checks say why; keep the default
        shown = False
    if shown or not apps.is_installed("django_q"):
        return
    from django_q import admin as registers_its_lists  # noqa: F401  (before they go)
    from django_q.models import Failure, OrmQ, Schedule, Success

    for model in (Success, Failure, Schedule, OrmQ):
        if site.is_registered(model):
            site.unregister(model)


class OffTheIndexMixin:
    """Keep a model's list off the admin's index and sidebar: its owner's page links to it.

    Its pages and permissions stay as they are."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        """Say no: the index and the sidebar leave it out."""
        return False

"""A tidy admin: django-q2's task lists hidden (a setting brings them back), internal
tables reached from their owners' pages, every queue on the queue settings page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.test import Client
from django_q.models import Failure, OrmQ, Schedule, Success

from django_ratequeue.admin.placement import hide_django_q_admin
from django_ratequeue.control import change_queue

pytestmark = pytest.mark.django_db
DJANGO_Q_LISTS = ["Successful tasks", "Failed tasks", "Scheduled tasks", "Queued tasks"]
INTERNAL = ["Unique claims", "Key limit changes"]


def test_the_index_holds_our_lists_alone(admin_client: Client) -> None:
    html = admin_client.get("/admin/").content.decode()
    for hidden in [*DJANGO_Q_LISTS, *INTERNAL]:
        assert hidden not in html, hidden
    for shown in ["Jobs", "Schedules", "Key limits", "Queue settings", "Batches"]:
        assert shown in html, shown
    assert html.count(">Failed") <= 1  # one "Failed" place: the jobs' own


def test_the_setting_brings_django_qs_lists_back(settings: Any) -> None:
    site = admin.AdminSite(name="another")
    for model in (Success, Failure, Schedule, OrmQ):
        site.register(model)
    settings.RATEQUEUE = {**settings.RATEQUEUE, "DJANGO_Q_ADMIN": True}
    hide_django_q_admin(site)
    assert all(site.is_registered(m) for m in (Success, Failure, Schedule, OrmQ))
    settings.RATEQUEUE = {**settings.RATEQUEUE, "DJANGO_Q_ADMIN": False}
    hide_django_q_admin(site)
    assert not any(site.is_registered(m) for m in (Success, Failure, Schedule, OrmQ))


def test_internal_tables_are_linked_from_their_owners(admin_client: Client) -> None:
    owners = {
        "/admin/django_ratequeue/keylimit/": "/admin/django_ratequeue/keylimitchange/",
        "/admin/django_ratequeue/job/": "/admin/django_ratequeue/uniqueclaim/",
    }
    for owner, internal in owners.items():
        assert f'href="{internal}"' in admin_client.get(owner).content.decode()
        assert admin_client.get(internal).status_code == 200


def test_the_queue_settings_page_lists_every_queue(admin_client: Client, settings: Any) -> None:
    queues = {"emails": {"max_concurrency": 2}, "llm": {"max_concurrency": 4, "paused": True}}
    settings.RATEQUEUE = {**settings.RATEQUEUE, "QUEUES": queues}
    change_queue("emails", max_concurrency=5)
    html = admin_client.get("/admin/django_ratequeue/queuesetting/").content.decode()
    table = html[html.index('class="rq-every-queue"') :]
    for name in ("default", "emails", "llm"):
        assert f'<th scope="row">{name}</th>' in table
    assert "max_concurrency 2</td><td>max_concurrency 5</td><td>max_concurrency 5</td>" in table
    assert "max_concurrency 4, paused</td><td>-</td><td>paused</td>" in table
    assert "/admin/django_ratequeue/queuesetting/add/?name=llm" in table

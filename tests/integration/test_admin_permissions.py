"""Admin actions need the permission they stand for, checked on the POST itself.

Staff with only the view permission see the pages; any action they post is refused with
403 and changes nothing (Django alone would drop the unlisted action and answer 200).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_ratequeue import enqueue, pause_queue
from django_ratequeue.engine.limits import QueueLimits
from django_ratequeue.models import CancelRequest, QueueSetting
from tests.queue import jobs

QUEUES = "/admin/django_ratequeue/queuesetting/"
JOBS = "/admin/django_ratequeue/job/"


def staff(client: Client, *codenames: str) -> User:
    user = User.objects.create_user("staff", password="not-used", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def pause_action(client: Client, action: str, *names: str) -> int:
    return client.post(QUEUES, {"action": action, "_selected_action": list(names)}).status_code


@pytest.mark.django_db
def test_view_only_staff_cannot_pause_resume_or_set_a_queue(client: Client) -> None:
    staff(client, "view_queuesetting")
    pause_queue("emails")
    QueueSetting.objects.create(name="reports", paused=False, max_concurrency=3)

    assert client.get(QUEUES).status_code == 200
    assert pause_action(client, "resume", "emails") == 403
    assert pause_action(client, "pause", "reports") == 403
    edit = client.post(f"{QUEUES}reports/change/", {"paused": "true", "max_concurrency": "9"})
    add = client.post(f"{QUEUES}add/", {"name": "mail", "paused": "true"})

    assert (edit.status_code, add.status_code) == (403, 403)
    assert QueueLimits.of("emails").max_concurrency == 0
    assert QueueLimits.of("reports").max_concurrency == 3
    assert sorted(QueueSetting.objects.values_list("name", flat=True)) == ["emails", "reports"]


@pytest.mark.django_db
def test_staff_with_the_change_permission_pause_resume_and_set(client: Client) -> None:
    staff(client, "view_queuesetting", "change_queuesetting")
    pause_queue("emails")
    QueueSetting.objects.create(name="reports", paused=False, max_concurrency=3)

    assert pause_action(client, "resume", "emails") == 302
    assert pause_action(client, "pause", "reports") == 302
    assert QueueLimits.of("emails").max_concurrency == 2  # as in settings again
    assert QueueLimits.of("reports").max_concurrency == 0
    edit = client.post(f"{QUEUES}reports/change/", {"paused": "", "max_concurrency": "9"})
    assert edit.status_code == 302
    assert QueueLimits.of("reports").max_concurrency == 9


@pytest.mark.django_db
def test_view_only_staff_cannot_cancel_or_retry_jobs(client: Client) -> None:
    staff(client, "view_job")
    handle = enqueue(jobs.add, args=[1, 2])

    for action in ["cancel_selected", "retry_selected"]:
        response = client.post(JOBS, {"action": action, "_selected_action": [handle.id]})
        assert response.status_code == 403
    assert not CancelRequest.objects.exists()

"""The admin's unique claims: listed with their job and expiry, released by a delete."""

from __future__ import annotations

import pytest
from django.test import Client

from django_ratequeue.models import Job, UniqueClaim
from tests.queue import jobs

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_ratequeue/uniqueclaim/"


def test_a_claim_is_listed_with_its_job_and_released_by_a_delete(admin_client: Client) -> None:
    first = jobs.add.using(unique_for=600).enqueue(1, 2)
    claim = UniqueClaim.objects.get()
    page = admin_client.get(CHANGELIST)
    assert page.status_code == 200
    text = page.content.decode()
    assert claim.key[:12] in text
    assert f"/admin/django_ratequeue/job/{first.id}/change/" in text
    assert admin_client.get(f"{CHANGELIST}?q={first.id}").content.decode().count(first.id) >= 1
    response = admin_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": [claim.pk], "post": "yes"}
    )
    assert response.status_code == 302
    assert not UniqueClaim.objects.exists()
    assert jobs.add.using(unique_for=600).enqueue(1, 2).id != first.id  # the key was released
    assert Job.objects.count() == 2


def test_claims_cannot_be_added_or_changed(admin_client: Client) -> None:
    jobs.add.using(unique_for=600).enqueue(1, 2)
    claim = UniqueClaim.objects.get()
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    page = admin_client.get(f"{CHANGELIST}{claim.pk}/change/")
    assert page.status_code == 200
    assert b'name="job_id"' not in page.content  # read-only

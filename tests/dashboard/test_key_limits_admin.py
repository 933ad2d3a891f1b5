"""Keys' own limits in the admin: edited there with a record of who changed what, and
shown with their weights among the dashboard's busiest keys."""

from __future__ import annotations

import pytest
from django.test import Client

from django_ratequeue import enqueue, set_key_limit
from django_ratequeue.models import KeyLimit, KeyLimitChange, RuntimeLimits
from tests.dashboard.test_views import DASHBOARD, running
from tests.queue import jobs

ADD = "/admin/django_ratequeue/keylimit/add/"


def change_url(row: KeyLimit) -> str:
    return f"/admin/django_ratequeue/keylimit/{row.pk}/change/"


@pytest.mark.django_db
def test_the_admin_edits_a_key_limit_and_records_who_changed_it(admin_client: Client) -> None:
    version = RuntimeLimits.ensure().key_limits_version
    data = {"queue": "llm", "key": "acme", "max_concurrency": "3", "weight": "2"}
    assert admin_client.post(ADD, data).status_code == 302
    row = KeyLimit.objects.get()
    assert (row.queue, row.key, row.max_concurrency, row.weight) == ("llm", "acme", 3, 2)
    response = admin_client.post(change_url(row), {"max_concurrency": "", "weight": "5"})
    assert response.status_code == 302
    assert KeyLimit.objects.values_list("max_concurrency", "weight").get() == (None, 5)
    delete = f"/admin/django_ratequeue/keylimit/{row.pk}/delete/"
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not KeyLimit.objects.exists()
    changes = KeyLimitChange.objects.order_by("pk").values_list(
        "changed_by", "old_max_concurrency", "new_max_concurrency", "old_weight", "new_weight"
    )
    assert list(changes) == [
        ("admin", None, 3, None, 2),
        ("admin", 3, None, 2, 5),
        ("admin", None, None, 5, None),
    ]
    assert RuntimeLimits.objects.get().key_limits_version == version + 3
    history = admin_client.get("/admin/django_ratequeue/keylimitchange/")
    assert history.status_code == 200 and "acme" in history.content.decode()
    record = KeyLimitChange.objects.first()
    assert record is not None
    edit = admin_client.get(f"/admin/django_ratequeue/keylimitchange/{record.pk}/change/")
    assert "Save" not in edit.content.decode()  # the record is read-only


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"key": "a", "weight": "0"}, "must be an integer from 1 to 1000"),
        ({"key": "a", "max_concurrency": "101"}, "(0: none start) must be an integer from 0"),
        ({"key": "a"}, "Set max_concurrency, weight or both"),
        ({"key": "a\x00", "weight": "2"}, "Null characters are not allowed"),
    ],
)
def test_the_admin_refuses_what_cannot_be_a_key_limit(
    admin_client: Client, data: dict[str, str], message: str
) -> None:
    empty = {"queue": "llm", "max_concurrency": "", "weight": ""}
    response = admin_client.post(ADD, {**empty, **data})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not KeyLimit.objects.exists() and not KeyLimitChange.objects.exists()


@pytest.mark.django_db
def test_the_dashboard_shows_the_busiest_keys_limits_and_weights(admin_client: Client) -> None:
    for key in ("bob", "bob", "carol", "dave"):
        running(enqueue(jobs.add, args=[0, 0], queue="emails", concurrency_key=key).id)
    set_key_limit("emails", "bob", max_concurrency=5, weight=3)
    response = admin_client.get(DASHBOARD)
    busy = response.context["snapshot"].busiest_keys
    shown = [(b.key, b.running, b.limit, b.weight, b.source, b.at_limit) for b in busy]
    assert shown == [
        ("bob", 2, 5, 3, "row", False),
        ("carol", 1, 2, 1, "", False),
        ("dave", 1, 2, 1, "", False),
    ]
    assert "(set for this key)" in response.content.decode()

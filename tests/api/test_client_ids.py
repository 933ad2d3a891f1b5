"""The ids HTTP clients choose are their own: stored scoped to their owner, shown as
chosen, so that one owner's id never collides with (or tells of) another's or the
server's; a bulk enqueue's ids that would overflow the id column are a 400."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from django_ratequeue import enqueue, enqueue_many
from django_ratequeue.api.ids import CLIENT_ID_MAX_LENGTH, stored_id
from django_ratequeue.api.serializers import bulk_id_max_length
from django_ratequeue.models import Job
from tests.api.conftest import API, logged_in
from tests.api.conftest import enqueue as post_job
from tests.queue.test_bulk_ids import blocked_call, open_transaction

pytestmark = pytest.mark.django_db

GREET = "tests.api.jobs.greet"


def test_two_owners_ids_are_two_jobs_and_no_409_tells_of_the_other(
    api: APIClient, other: APIClient, ada: User, bob: User
) -> None:
    ada_job = post_job(api, GREET, args=["Ada"], options={"id": "report"})
    bob_job = post_job(other, GREET, args=["Bob"], options={"id": "report"})

    assert ada_job.status_code == bob_job.status_code == 201, bob_job.content
    assert ada_job.json()["id"] == bob_job.json()["id"] == "report"
    assert bob_job["Location"] == f"{API}jobs/report/"
    assert Job.objects.get(pk=stored_id(f"auth.user:{ada.pk}", "report")).args == ["Ada"]
    assert Job.objects.get(pk=stored_id(f"auth.user:{bob.pk}", "report")).args == ["Bob"]
    again = post_job(other, GREET, args=["Bob"], options={"id": "report"})
    assert again.status_code == 409
    assert "'report' already exists" in again.json()["options"]["id"][0]


def test_a_client_cannot_take_an_id_the_server_will_use(api: APIClient) -> None:
    squatted = post_job(api, GREET, args=["Ada"], options={"id": "nightly-export"})
    assert squatted.status_code == 201

    handle = enqueue(GREET, args=["server"], id="nightly-export")

    assert Job.objects.get(pk=handle.id).args == ["server"]
    assert api.get(f"{API}jobs/nightly-export/").json()["id"] == "nightly-export"
    canceled = api.post(f"{API}jobs/nightly-export/cancel/")
    assert canceled.status_code == 202
    assert Job.objects.get(pk="nightly-export").status == "waiting"  # the server's, untouched


def test_the_server_generated_ids_are_found_as_before(api: APIClient) -> None:
    job_id = post_job(api, GREET, args=["Ada"]).json()["id"]
    assert Job.objects.filter(pk=job_id).exists()
    assert api.get(f"{API}jobs/{job_id}/").json()["id"] == job_id


@pytest.mark.parametrize("items", [2, 11])
def test_a_bulk_id_without_room_for_the_most_items_ids_is_400_and_nothing_is_written(
    api: APIClient, items: int
) -> None:
    prefix = "x" * (bulk_id_max_length() + 1)  # fits 2 or 11 items' ids, not 1,000 items'
    assert len(f"{prefix}-{items - 1}") <= CLIENT_ID_MAX_LENGTH
    response = api.post(
        f"{API}jobs/bulk/",
        {"function": GREET, "items": [{"args": ["Ada"]}] * items, "options": {"id": prefix}},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert "Too long for a bulk enqueue" in response.json()["options"]["id"][0]
    assert not Job.objects.exists()
    fits = api.post(
        f"{API}jobs/bulk/",
        {"function": GREET, "items": [{"args": ["Ada"]}] * items, "options": {"id": prefix[1:]}},
        format="json",
    )
    assert fits.status_code == 201, fits.content


def test_enqueue_many_refuses_ids_longer_than_the_column() -> None:
    with pytest.raises(ValueError, match="too long for 11 jobs"):
        enqueue_many(GREET, ["Ada"] * 11, id="x" * 198)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="two writers at once: PostgreSQL")
@pytest.mark.parametrize("on_duplicate_id", ["error", "ignore"])
def test_a_bulk_post_racing_the_servers_ids_gets_its_own_jobs(
    ada: User, bob: User, on_duplicate_id: str
) -> None:
    """The issue's case: while the server's enqueue_many(id="tag") is in its transaction,
    Bob's bulk POST with id "tag" used to get 201 with the server's jobs."""
    client = logged_in(bob)
    body = {"function": GREET, "items": [{"args": ["Bob"]}, {"args": ["Bea"]}]}
    body["options"] = {"id": "tag", "on_duplicate_id": on_duplicate_id}

    with open_transaction(lambda: enqueue_many(GREET, ["Alice", "Alan"], id="tag", owner="alice")):
        thread, outcome = blocked_call(
            lambda: client.post(f"{API}jobs/bulk/", body, format="json")
        )
        thread.join(10)  # Bob's ids are his own: his INSERT waits for nobody
    response = outcome[0]

    assert response.status_code == 201, response.content
    assert [job["id"] for job in response.json()] == ["tag-0", "tag-1"]
    bobs = [stored_id(f"auth.user:{bob.pk}", f"tag-{n}") for n in range(2)]
    assert [Job.objects.get(pk=job_id).args for job_id in bobs] == [["Bob"], ["Bea"]]
    assert [Job.objects.get(pk=f"tag-{n}").owner for n in range(2)] == ["alice", "alice"]

"""GET jobs/<id>/ and POST jobs/<id>/cancel/: a job as its owner sees it; to anybody else
it does not exist."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from django_ratequeue import enqueue as enqueue_job
from django_ratequeue.api.serializers import OUTPUT_PER_RESPONSE
from django_ratequeue.engine.models import Status
from django_ratequeue.models import CancelRequest, Job, OutputChunk
from tests.api import jobs
from tests.api.conftest import API, enqueue

pytestmark = pytest.mark.django_db


def test_the_owner_sees_the_job(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    Job.objects.filter(pk=job_id).update(
        status=Status.RUNNING, attempts=1, progress={"done": 1, "total": 2}
    )

    body = api.get(f"{API}jobs/{job_id}/").json()

    assert body["status"] == "running"
    assert body["attempts"] == 1
    assert body["progress"] == {"done": 1, "total": 2}
    assert body["result"] is None
    assert body["error"] is None
    assert (body["output"], body["more_output"]) == ([], False)


def test_a_complete_job_shows_its_result_and_a_failed_one_its_error(api: APIClient) -> None:
    done = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    failed = enqueue(api, "tests.api.jobs.greet", args=["Bob"]).json()["id"]
    canceled = enqueue(api, "tests.api.jobs.greet", args=["Cy"]).json()["id"]
    now = timezone.now()
    Job.objects.filter(pk=done).update(status=Status.COMPLETE, result="Hi", finished_at=now)
    Job.objects.filter(pk=failed).update(
        status=Status.FAILED, error="ValueError: no", traceback="secret", finished_at=now
    )
    Job.objects.filter(pk=canceled).update(status=Status.CANCELED, finished_at=now)

    complete = api.get(f"{API}jobs/{done}/").json()
    assert (complete["result"], complete["error"]) == ("Hi", None)
    assert complete["finished_at"] is not None
    failure = api.get(f"{API}jobs/{failed}/").json()
    assert (failure["result"], failure["error"]) == (None, "ValueError: no")
    assert "secret" not in str(failure)  # no traceback over HTTP
    assert api.get(f"{API}jobs/{canceled}/").json()["error"] == f"Job {canceled} was canceled"


def test_cancel_asks_for_the_job_to_be_canceled(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]

    response = api.post(f"{API}jobs/{job_id}/cancel/")

    assert response.status_code == 202
    assert response.json()["id"] == job_id
    assert CancelRequest.objects.filter(job_id=job_id).exists()


def test_another_users_job_is_404_for_detail_cancel_and_events(
    api: APIClient, other: APIClient
) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    missing = other.get(f"{API}jobs/no-such-job/")

    for response in (
        other.get(f"{API}jobs/{job_id}/"),
        other.post(f"{API}jobs/{job_id}/cancel/"),
        other.get(f"{API}jobs/{job_id}/events/"),
    ):
        assert response.status_code == 404
        assert response.json() == missing.json() == {"detail": "There is no such job."}
    assert not CancelRequest.objects.exists()


def test_a_job_enqueued_by_code_without_an_owner_is_nobodys_over_http(
    api: APIClient, ada: User
) -> None:
    """Jobs without an owner (enqueued by the project's code) are never shown over HTTP,
    nor are jobs owned by something else than a user (a session, a tenant...)."""
    nobodys = enqueue_job(jobs.greet, args=["Ada"])
    tenants = enqueue_job(jobs.greet, args=["Ada"], owner=f"tenant:{ada.pk}")
    for handle in (nobodys, tenants):
        assert api.get(f"{API}jobs/{handle.id}/").status_code == 404


def test_anonymous_visitors_see_nothing_by_default(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    assert APIClient().get(f"{API}jobs/{job_id}/").status_code in (401, 403)


def test_the_job_carries_its_output_after_since(api: APIClient) -> None:
    """A client that cannot stream reads the output from the job, a poll at a time."""
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    OutputChunk.objects.bulk_create(
        OutputChunk(job_id=job_id, index=n, text=f"w{n} ") for n in range(1, 4)
    )

    everything = api.get(f"{API}jobs/{job_id}/").json()
    after_two = api.get(f"{API}jobs/{job_id}/?since=2").json()
    after_all = api.get(f"{API}jobs/{job_id}/?since=3").json()

    assert everything["output"] == [
        {"index": 1, "text": "w1 "},
        {"index": 2, "text": "w2 "},
        {"index": 3, "text": "w3 "},
    ]
    assert after_two["output"] == [{"index": 3, "text": "w3 "}]
    assert after_all["output"] == []
    assert not everything["more_output"] and not after_all["more_output"]


def test_the_output_of_one_answer_is_bounded(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    total = OUTPUT_PER_RESPONSE + 5
    OutputChunk.objects.bulk_create(
        OutputChunk(job_id=job_id, index=n, text="x") for n in range(1, total + 1)
    )

    first = api.get(f"{API}jobs/{job_id}/").json()
    last = first["output"][-1]["index"]
    rest = api.get(f"{API}jobs/{job_id}/?since={last}").json()

    assert len(first["output"]) == OUTPUT_PER_RESPONSE and first["more_output"]
    assert [chunk["index"] for chunk in rest["output"]] == list(
        range(OUTPUT_PER_RESPONSE + 1, total + 1)
    )
    assert not rest["more_output"]


@pytest.mark.parametrize("since", ["-1", "abc", "1.5", "inf", "nan", "%s", "9" * 40, ""])
def test_a_bad_since_is_a_400_naming_it(api: APIClient, since: str) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    response = api.get(f"{API}jobs/{job_id}/", {"since": since})
    assert response.status_code == 400
    assert list(response.json()) == ["since"]


def test_another_users_output_is_not_shown(api: APIClient, other: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    OutputChunk.objects.create(job_id=job_id, index=1, text="secret")
    response = other.get(f"{API}jobs/{job_id}/?since=0")
    assert response.status_code == 404
    assert "secret" not in response.content.decode()

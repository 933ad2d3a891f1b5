"""POST jobs/ and jobs/bulk/: only exposed jobs, owned by the requesting user, bad input a
400 naming its field (or a 413 for a body too big to read) with nothing written, refusals
a 429 with Retry-After."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_ratequeue import Status, get_handle
from django_ratequeue.api.ids import stored_id
from django_ratequeue.models import Job
from tests.api.conftest import API, enqueue

pytestmark = pytest.mark.django_db

GREET = "tests.api.jobs.greet"
SIDE_EFFECT = "tests.queue.side_effect"


def settings_with(**changes: Any) -> Any:
    from django.conf import settings

    return override_settings(RATEQUEUE={**settings.RATEQUEUE, **changes})


def test_enqueue_answers_201_with_the_job(api: APIClient, ada: User) -> None:
    response = enqueue(api, GREET, args=["Ada"], kwargs={"punctuation": "?"})

    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {
        "id",
        "function",
        "status",
        "attempts",
        "progress",
        "result",
        "error",
        "created_at",
        "start_at",
        "finished_at",
        "batch",
    }
    assert body["function"] == GREET
    assert body["status"] == "waiting"
    assert body["attempts"] == 0
    assert body["progress"] == body["result"] == body["error"] == None  # noqa: E711
    assert response["Location"] == f"{API}jobs/{body['id']}/"
    detail = api.get(response["Location"]).json()
    eta = detail.pop("eta")  # when it will start (tests/api/test_eta.py)
    # No qcluster in this test: no worker; the position is hidden over HTTP (test_eta.py).
    assert (eta["position"], eta["basis"]) == (None, "no_worker")
    assert detail == {**body, "output": [], "more_output": False}  # the job as written
    job = Job.objects.get(pk=body["id"])
    assert (job.args, job.kwargs) == (["Ada"], {"punctuation": "?"})
    # The requesting user owns it: their handle sees it, nobody else's does.
    assert get_handle(body["id"], owner=ada).status() == Status.WAITING


def test_a_token_authenticates_too(ada: User) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=ada).key}")

    assert enqueue(client, GREET, args=["Ada"]).status_code == 201


def test_a_session_write_needs_its_csrf_token(ada: User) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(ada)

    refused = enqueue(client, GREET, args=["Ada"])

    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert not Job.objects.exists()


def test_anonymous_visitors_are_refused_by_default() -> None:
    refused = enqueue(APIClient(), GREET, args=["Ada"])
    assert refused.status_code in (401, 403)
    assert not Job.objects.exists()


def test_anonymous_visitors_allowed_own_their_jobs_through_their_session() -> None:
    visitor = APIClient(enforce_csrf_checks=True)
    visitor.get("/admin/login/")
    with settings_with(API_ALLOW_ANONYMOUS=True):
        assert enqueue(visitor, GREET, args=["Ada"]).status_code == 403  # no CSRF token
        visitor.credentials(HTTP_X_CSRFTOKEN=visitor.cookies["csrftoken"].value)
        created = enqueue(visitor, GREET, args=["Ada"])
        job_id = created.json()["id"]

        assert created.status_code == 201
        assert visitor.get(f"{API}jobs/{job_id}/").status_code == 200
        assert APIClient().get(f"{API}jobs/{job_id}/").status_code == 404
    session = visitor.cookies["sessionid"].value
    assert Job.objects.get(pk=job_id).owner == f"session:{session}"


@pytest.mark.parametrize(
    "function",
    ["tests.api.jobs.not_exposed", "tests.queue.jobs.add", f"{SIDE_EFFECT}.wipe", "os.system"],
)
def test_a_function_that_is_not_exposed_is_404_and_nothing_is_written_or_imported(
    api: APIClient, function: str
) -> None:
    sys.modules.pop(SIDE_EFFECT, None)
    response = enqueue(api, function)

    assert response.status_code == 404
    assert response.json() == {"detail": "There is no such function to enqueue."}
    assert not Job.objects.exists()
    assert SIDE_EFFECT not in sys.modules


def test_the_permission_hook_decides_who_may_enqueue(api: APIClient, ada: User) -> None:
    assert enqueue(api, "tests.api.jobs.staff_only").status_code == 403
    assert not Job.objects.exists()
    User.objects.filter(pk=ada.pk).update(is_staff=True)
    assert enqueue(api, "tests.api.jobs.staff_only").status_code == 201


def test_the_server_decides_queue_key_and_cost(api: APIClient, ada: User) -> None:
    created = enqueue(api, "tests.api.jobs.metered", kwargs={"prompt": "four"})

    job = Job.objects.get(pk=created.json()["id"])
    assert (job.queue, job.concurrency_key, job.cost) == ("metered", f"user:{ada.pk}", 4)


def test_the_options_a_request_may_give(api: APIClient) -> None:
    start = (timezone.now() + timezone.timedelta(hours=1)).isoformat()
    created = enqueue(api, GREET, args=["Ada"], options={"start_at": start, "id": "mine"})

    assert created.status_code == 201, created.content
    assert created.json()["status"] == "scheduled"
    assert created.json()["id"] == "mine"
    again = enqueue(api, GREET, args=["Ada"], options={"id": "mine"})
    assert again.status_code == 409
    assert "already exists" in again.json()["options"]["id"][0]
    same = enqueue(api, GREET, args=["Bob"], options={"id": "mine", "on_duplicate_id": "ignore"})
    assert same.status_code == 201
    assert same.json() == created.json()  # the existing job, unchanged


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"function": ["x"]}, "function", "Not a valid string."),
        ({"args": {"a": 1}}, "args", 'Expected a list of items but got type "dict".'),
        ({"kwargs": [1]}, "kwargs", 'Expected a dictionary of items but got type "list".'),
        ({"args": ["Ada", 1, 2]}, "args", "too many positional arguments"),
        ({"args": [], "kwargs": {"name": "A", "shout": 1}}, "kwargs", "unexpected keyword"),
        ({"colour": "red"}, "colour", "Unknown field"),
        ({"options": {"queue": "fast"}}, "options", "Decided by the server"),
        ({"options": {"cost": 0}}, "options", "Decided by the server"),
        ({"options": {"owner": "bob"}}, "options", "Decided by the server"),
        ({"options": {"speed": 1}}, "options", "Unknown option"),
        ({"options": {"start_at": "9999-12-31T00:00:00Z"}}, "options", "too far ahead"),
        ({"options": {"start_at": "tomorrow"}}, "options", "not an ISO-8601"),
        ({"options": {"run_after": -1}}, "options", "must be 0 or more"),
        ({"options": {"id": "x" * 187}}, "options", "no more than 186 characters"),
        ({"options": {"id": "a\x00b"}}, "options", "Null characters are not allowed"),
        ({"args": ["a\x00b"]}, "args", "NUL"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_nothing_is_written(
    api: APIClient, body: dict[str, Any], field: str, message: str
) -> None:
    sent = {"function": GREET, "args": ["Ada"], **body}
    response = api.post(f"{API}jobs/", sent, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert field in errors, errors
    assert message in str(errors[field])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "JSON parse error"),
        ('{"function": "tests.api.jobs.greet", "args": [NaN]}', "JSON parse error"),
        ('{"function": "tests.api.jobs.greet", "args": [Infinity]}', "JSON parse error"),
        ("[1, 2]", "Invalid data. Expected a dictionary"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_400(api: APIClient, text: str, message: str) -> None:
    response = api.post(f"{API}jobs/", text, content_type="application/json")
    assert response.status_code == 400
    assert message in json.dumps(response.json())
    assert not Job.objects.exists()


def test_a_number_json_turns_into_infinity_is_refused(api: APIClient) -> None:
    text = '{"function": "tests.api.jobs.greet", "args": [1e999]}'
    response = api.post(f"{API}jobs/", text, content_type="application/json")
    assert response.status_code == 400
    assert "args" in response.json()
    assert not Job.objects.exists()


def test_only_json_is_read(api: APIClient) -> None:
    response = api.post(f"{API}jobs/", {"function": GREET}, format="multipart")
    assert response.status_code == 415


def test_a_10_mb_body_is_413_before_it_is_read_whole(api: APIClient) -> None:
    response = enqueue(api, GREET, args=["x" * 10_000_000])
    assert response.status_code == 413
    assert 'RATEQUEUE["API_MAX_BODY_BYTES"]' in response.json()["detail"]
    assert not Job.objects.exists()


def test_arguments_over_their_cap_are_400(api: APIClient) -> None:
    with settings_with(MAX_ARGUMENTS_BYTES=1000):
        response = enqueue(api, GREET, args=["x" * 2000])
    assert response.status_code == 400
    assert "the most is 1000" in response.json()["args"][0]


def test_text_is_stored_exactly(api: APIClient) -> None:
    hostile = "%s %(name)s '; DROP TABLE x; -- \\u0000 ☃"
    created = enqueue(api, GREET, args=[hostile])
    assert Job.objects.get(pk=created.json()["id"]).args == [hostile]


def test_enqueue_rate_limit_is_429_with_retry_after(api: APIClient) -> None:
    with settings_with(ENQUEUE_RATE_LIMIT={"rate": 1, "period": 60, "capacity": 1}):
        assert enqueue(api, GREET, args=["Ada"]).status_code == 201
        refused = enqueue(api, GREET, args=["Ada"])

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "ratequeue:enqueue" in refused.json()["detail"]
    assert Job.objects.count() == 1


def test_a_queue_whose_reservations_are_used_up_is_429_with_retry_after(
    api: APIClient,
) -> None:
    metered = {
        "RATE_LIMITS": {
            "characters": {"kind": "token bucket", "rate": 10, "period": 60, "max_reserved": 10}
        },
        "QUEUES": {"metered": {"max_concurrency": 1, "rate_limit": "characters"}},
    }
    with settings_with(**metered):
        from django_ratequeue import rate_limit

        rate_limit("characters", count=20, reserve=True)  # full, and 10 reserved ahead
        refused = enqueue(api, "tests.api.jobs.metered", kwargs={"prompt": "hello"})

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "characters" in refused.json()["detail"]
    assert not Job.objects.exists()


def test_the_api_is_throttled_by_its_scope_when_configured(api: APIClient) -> None:
    from django.conf import settings

    scope = {"ratequeue_enqueue": {"kind": "token bucket", "rate": 2, "period": 60}}
    with settings_with(RATE_LIMITS={**settings.RATEQUEUE["RATE_LIMITS"], **scope}):
        codes = [enqueue(api, GREET, args=["Ada"]).status_code for _ in range(3)]
        refused = enqueue(api, GREET, args=["Ada"])
    assert codes == [201, 201, 429]
    assert int(refused["Retry-After"]) >= 1
    assert Job.objects.count() == 2


# --- bulk -------------------------------------------------------------------------------


def bulk(client: APIClient, **body: Any) -> Any:
    return client.post(f"{API}jobs/bulk/", {"function": GREET, **body}, format="json")


def test_bulk_enqueue_answers_the_jobs_in_order(api: APIClient, ada: User) -> None:
    items = [{"args": ["Ada"]}, {"kwargs": {"name": "Bob"}}, {"args": ["Cy"], "kwargs": {}}]
    response = bulk(api, items=items, options={"id": "batch"})

    assert response.status_code == 201, response.content
    assert [job["id"] for job in response.json()] == ["batch-0", "batch-1", "batch-2"]
    stored = [stored_id(f"auth.user:{ada.pk}", f"batch-{n}") for n in range(3)]
    assert [Job.objects.get(pk=job_id).args for job_id in stored] == [["Ada"], [], ["Cy"]]
    assert {job.owner for job in Job.objects.all()} == {f"auth.user:{ada.pk}"}


def test_bulk_with_per_item_server_options(api: APIClient, ada: User) -> None:
    items = [{"kwargs": {"prompt": "one"}}, {"kwargs": {"prompt": "three"}}]
    response = api.post(
        f"{API}jobs/bulk/",
        {"function": "tests.api.jobs.metered", "items": items, "options": {"id": "m"}},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert [job["id"] for job in response.json()] == ["m-0", "m-1"]
    stored = [stored_id(f"auth.user:{ada.pk}", f"m-{n}") for n in range(2)]
    assert [Job.objects.get(pk=job_id).cost for job_id in stored] == [3, 5]


def test_bulk_is_all_or_nothing(api: APIClient) -> None:
    items = [{"args": ["Ada"]}, {"args": ["Bob", "!", "extra"]}]
    response = bulk(api, items=items)

    assert response.status_code == 400
    assert response.json()["items"][0] == {}
    assert "too many positional arguments" in response.json()["items"][1]["args"][0]
    assert not Job.objects.exists()


def test_bulk_refused_by_the_enqueue_limit_writes_nothing(api: APIClient) -> None:
    with settings_with(ENQUEUE_RATE_LIMIT={"rate": 3, "period": 60, "capacity": 3}):
        assert enqueue(api, GREET, args=["Ada"]).status_code == 201
        refused = bulk(api, items=[{"args": ["Ada"]}] * 3)
        never = bulk(api, items=[{"args": ["Ada"]}] * 4)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert never.status_code == 400  # more than the limit could ever admit at once
    assert "can never fit" in never.json()["non_field_errors"][0]
    assert Job.objects.count() == 1


def test_bulk_has_a_cap_on_its_items(api: APIClient) -> None:
    with settings_with(API_MAX_BULK_ITEMS=2):
        refused = bulk(api, items=[{"args": ["Ada"]}] * 3)
    assert refused.status_code == 400
    assert "at most 2" in refused.json()["items"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("items", [[], {"args": []}, None])
def test_bulk_needs_a_list_of_items(api: APIClient, items: Any) -> None:
    assert bulk(api, items=items).status_code == 400


def test_bulk_of_a_function_that_is_not_exposed_is_404(api: APIClient) -> None:
    response = api.post(
        f"{API}jobs/bulk/",
        {"function": "tests.queue.jobs.add", "items": [{"args": [1, 2]}]},
        format="json",
    )
    assert response.status_code == 404
    assert not Job.objects.exists()


@pytest.mark.parametrize("job_id", ["bulk", ".", "..", "reports/2026"])
def test_an_id_whose_url_would_be_another_ones_is_refused(api: APIClient, job_id: str) -> None:
    """GET jobs/bulk/ is the bulk enqueue's URL, and a browser resolves jobs/../ to the
    API's root: a job with such an id could never be read, followed or canceled."""
    response = enqueue(api, GREET, args=["Ada"], options={"id": job_id})
    bulk = api.post(
        f"{API}jobs/bulk/",
        {"function": GREET, "items": [{}], "options": {"id": job_id}},
        format="json",
    )

    for refused in (response, bulk):
        assert refused.status_code == 400
        assert "cannot be the id of a job enqueued over HTTP" in refused.json()["options"]["id"][0]
    assert not Job.objects.exists()


def test_an_id_that_only_starts_like_a_route_is_its_own_url(api: APIClient) -> None:
    created = enqueue(api, GREET, args=["Ada"], options={"id": "bulk-reports"})
    assert created.status_code == 201
    assert api.get(f"{API}jobs/bulk-reports/").json()["id"] == "bulk-reports"


def test_an_enqueue_costs_its_authentication_and_one_insert(ada: User) -> None:
    """A regression guard on the statements per request: the token's lookup, then the job's
    INSERT (with its wake-up signal in the same statement), and nothing else: no read
    back, no session, no count."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=ada).key}")
    for _ in range(2):  # the INSERT is prepared at its second use on a connection
        enqueue(client, GREET, args=["warm-up"])

    with (
        settings_with(API_THROTTLES={"enqueue": None, "read": None}),
        CaptureQueriesContext(connection) as queries,
    ):
        response = enqueue(client, GREET, args=["Ada"])

    assert response.status_code == 201, response.content
    statements = [query["sql"].split()[0].upper() for query in queries.captured_queries]
    assert statements == ["SELECT", "EXECUTE" if connection.vendor == "postgresql" else "INSERT"]

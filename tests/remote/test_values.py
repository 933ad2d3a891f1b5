"""What a remote worker reports is stored whatever it holds, or fails only its own attempt:
a result no database can store fails its attempt saying why (as on a local runner), an
error text is kept with what cannot be stored replaced, progress that cannot be stored is
a 400 naming it, and a value that slips past these checks fails its attempt alone, the
others ended with it written."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from rest_framework.test import APIClient

from django_ratequeue import JobFailed, enqueue
from django_ratequeue.engine import protocol
from django_ratequeue.engine.bounds import MAX_JSON_DEPTH
from django_ratequeue.engine.models import Attempt, Outcome, WorkerKey
from tests.queue.jobs import return_nested
from tests.remote.conftest import API
from tests.remote.test_protocol import claim, dispatch, report

pytestmark = pytest.mark.usefixtures("remote_queues")

# What os.fsdecode() gives for a file name that is not UTF-8.
SURROGATE = os.fsdecode(b"caf\xe9")


def raw(client: APIClient, path: str, body: Any) -> Any:
    """POST ``body`` as JSON text (ASCII, as a worker sends it: a lone surrogate escaped)."""
    return client.post(f"{API}{path}", json.dumps(body), content_type="application/json")


def claimed(worker: APIClient, count: int) -> list[Any]:
    handles = [
        enqueue("tests.queue.jobs.add", args=[n, n], queue="gpu", retries=0) for n in range(count)
    ]
    dispatch()
    attempts = claim(worker, max=count)
    by_job = {attempt["job_id"]: attempt for attempt in attempts}
    return [(handle, by_job[handle.id]) for handle in handles]


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        ({"file": SURROGATE}, "return value must be valid Unicode: it holds a lone surrogate"),
        (return_nested(MAX_JSON_DEPTH + 1), "must not nest lists and objects more than"),
        ("x" * 200, 'RATEQUEUE["MAX_RESULT_BYTES"] (100)'),
    ],
)
def test_a_result_a_job_may_not_return_fails_its_attempt_saying_why(
    worker: APIClient, settings: Any, result: Any, reason: str
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_RESULT_BYTES": 100}
    [(handle, attempt)] = claimed(worker, 1)
    for _try in range(2):  # sent again after a lost answer: the same answer, nothing changed
        response = raw(worker, f"attempts/{attempt['id']}/complete/", {"result": result})
        assert response.status_code == 200, response.content
        assert reason in response.json()["detail"]
    dispatch()
    with pytest.raises(JobFailed, match=r"ValueError: The job.s (return value|result)") as failed:
        handle.result(timeout=0)
    assert reason in failed.value.error
    assert Attempt.objects.get(pk=attempt["id"]).outcome == Outcome.FAILED


def test_an_error_text_is_kept_whatever_it_holds(worker: APIClient) -> None:
    """The real error, which names the file, is stored; a NUL escaped, a surrogate replaced."""
    [(by_endpoint, first), (in_claim, second)] = claimed(worker, 2)
    error = f"FileNotFoundError: {SURROGATE}.txt \x00"
    response = raw(worker, f"attempts/{first['id']}/fail/", {"error": error, "traceback": error})
    assert response.status_code == 200, response.content
    body = {
        "worker": "w1",
        "max": 0,
        "reports": [{"id": second["id"], "action": "fail", "error": error}],
    }
    response = raw(worker, "claim/", body)
    assert response.status_code == 200, response.content
    assert response.json()["reports"] == [{"id": second["id"], "status": 200, "detail": ""}]
    dispatch()
    for handle in (by_endpoint, in_claim):
        with pytest.raises(JobFailed) as failed:
            handle.result(timeout=0)
        assert failed.value.error == "FileNotFoundError: caf?.txt \\x00"


def test_a_claim_s_reports_end_each_attempt_as_its_own_report_would(worker: APIClient) -> None:
    [(good, first), (bad, second)] = claimed(worker, 2)
    body = {
        "worker": "w1",
        "max": 0,
        "reports": [
            {"id": first["id"], "action": "complete", "result": 0},
            {"id": second["id"], "action": "complete", "result": SURROGATE},
        ],
    }
    response = raw(worker, "claim/", body)
    assert response.status_code == 200, response.content
    answers = response.json()["reports"]
    assert [answer["status"] for answer in answers] == [200, 200]
    assert answers[0]["detail"] == ""
    assert "lone surrogate" in answers[1]["detail"]
    dispatch()
    assert good.result(timeout=0) == 0
    with pytest.raises(JobFailed, match="lone surrogate"):
        bad.result(timeout=0)


@pytest.mark.parametrize(
    "progress",
    [{"file": SURROGATE}, {SURROGATE: 1}, {"x": return_nested(MAX_JSON_DEPTH)}],
)
def test_progress_no_database_can_store_is_a_400_naming_it(
    worker: APIClient, progress: Any
) -> None:
    [(handle, attempt)] = claimed(worker, 1)
    response = raw(worker, f"attempts/{attempt['id']}/progress/", {"progress": progress})
    assert response.status_code == 400, response.content
    assert "The job's progress must" in response.json()["progress"][0]
    assert handle.progress() is None
    assert report(worker, attempt["id"], "progress", {"progress": {"done": 1}}).status_code == 200


@pytest.mark.postgres_only
def test_an_outcome_the_database_refuses_fails_that_attempt_alone(
    worker: APIClient, gpu_key: tuple[WorkerKey, str]
) -> None:
    """A value that slipped past the checks (a report not made by Report's constructors):
    the others of the batch are written, that attempt fails with the reason."""
    [(good, first), (bad, second)] = claimed(worker, 2)
    ended = [
        protocol.Ended(first["id"], protocol.Report.returned(2)),
        protocol.Ended(second["id"], protocol.Report.returned(1).unchecked(result=SURROGATE)),
    ]
    claimant = protocol.Claimant.remote(gpu_key[0], "")
    answers = [protocol.report(claimant, ended) for _try in range(2)]  # and sent again
    assert answers[0] == answers[1]
    assert answers[0][first["id"]] == protocol.Report(Outcome.SUCCEEDED, result=2)
    stored = answers[0][second["id"]]
    assert stored is not None and stored.outcome == Outcome.FAILED
    assert stored.error.startswith("The database refused this attempt's outcome, so it failed")
    assert stored.exception_class_path == "django.db.utils.DataError"
    dispatch()
    assert good.result(timeout=0) == 2
    with pytest.raises(JobFailed, match="Unicode low surrogate must follow a high surrogate"):
        bad.result(timeout=0)

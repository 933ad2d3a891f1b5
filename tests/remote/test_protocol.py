"""The remote workers' protocol, request by request, against the loop run in this process:
routing, claims, reports and their idempotency, stale leases, keys and hostile bodies."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from django_ratequeue import clock, enqueue
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Attempt, Job, Outcome, Status, WorkerKey
from django_ratequeue.engine.runner import Runner
from django_ratequeue.engine.workerkeys import SILENT_LEASES, create_key, revoke
from tests.queue.steps import leading_loop
from tests.remote.conftest import API, keyed

pytestmark = pytest.mark.usefixtures("remote_queues")


def dispatch() -> None:
    leading_loop().run(30)


def claim(client: APIClient, **body: Any) -> Any:
    response = client.post(f"{API}claim/", {"worker": "w1", "max": 10, **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["attempts"]


def report(client: APIClient, attempt_id: int, action: str, body: Any = None) -> Any:
    return client.post(f"{API}attempts/{attempt_id}/{action}/", body or {}, format="json")


def test_local_runners_never_claim_remote_attempts(db: None) -> None:
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    assert Runner(beat(force=True)).drain() == 0
    attempt = Attempt.objects.get(job_id=handle.id)
    assert attempt.remote and attempt.worker == "" and attempt.ended_at is None


def test_a_claimed_attempt_completes_its_job(worker: APIClient) -> None:
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker)
    assert attempt["function"] == "tests.queue.jobs.add"
    assert (attempt["args"], attempt["kwargs"], attempt["output_index"]) == ([1, 2], {}, 1)
    # The trace context the job was enqueued in, for the worker's span (docs/tracing.md).
    assert attempt["traceparent"] == Job.objects.get(pk=handle.id).traceparent
    assert report(worker, attempt["id"], "complete", {"result": 3}).status_code == 200
    # The same report again (its response lost): a success that changes nothing.
    assert report(worker, attempt["id"], "complete", {"result": 3}).status_code == 200
    assert report(worker, attempt["id"], "complete", {"result": 4}).status_code == 409
    dispatch()
    assert handle.result(timeout=0) == 3


def test_a_retried_claim_returns_what_the_first_took(worker: APIClient) -> None:
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [first] = claim(worker)
    [again] = claim(worker)  # the worker never got the first answer
    assert again["id"] == first["id"]
    assert claim(worker, running=[first["id"]]) == []


def test_a_claim_reports_outcomes_and_takes_more(worker: APIClient, settings: Any) -> None:
    """One request ends attempts and takes the next: each report answered as its own
    endpoint would; sent again, the same answers and the same attempts."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_RESULT_BYTES": 100}
    done, big, next_ = (
        enqueue("tests.queue.jobs.add", args=[n, 2], queue="gpu") for n in range(3)
    )
    dispatch()
    first, second = claim(worker, max=2)
    body = {
        "worker": "w1",
        "max": 1,
        "running": [second["id"]],
        "reports": [
            {"id": first["id"], "action": "complete", "result": 3},
            {"id": second["id"], "action": "complete", "result": "x" * 200},
            {"id": 10**12, "action": "fail", "error": "not ours"},
        ],
    }
    answers = []
    for _try in range(2):  # the first answer lost: sent again, unchanged
        response = worker.post(f"{API}claim/", body, format="json")
        assert response.status_code == 200, response.content
        answers.append(response.json())
    for answer in answers:
        assert [r["status"] for r in answer["reports"]] == [200, 200, 409]
        assert answer["reports"][0]["detail"] == ""
        assert "MAX_RESULT_BYTES" in answer["reports"][1]["detail"]
        assert [a["job_id"] for a in answer["attempts"]] == [next_.id]
    dispatch()
    assert done.result(timeout=0) == 3  # as reported
    assert second["job_id"] == big.id
    # A result a job may not return fails its attempt, as on a local runner, saying why.
    refused = Attempt.objects.get(pk=second["id"])
    assert refused.outcome == Outcome.FAILED
    assert refused.error == answers[0]["reports"][1]["detail"]


def test_failures_follow_the_retry_policy(worker: APIClient) -> None:
    retried = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    final = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    dispatch()
    first, second = claim(worker)
    by_job = {first["job_id"]: first, second["job_id"]: second}
    body = {"error": "ValueError: no", "traceback": "Traceback..."}
    assert report(worker, by_job[retried.id]["id"], "fail", body).status_code == 200
    body = {"error": "bad input", "retryable": False}
    assert report(worker, by_job[final.id]["id"], "fail", body).status_code == 200
    dispatch()
    assert Job.objects.get(pk=retried.id).status == Status.RETRYING
    job = Job.objects.get(pk=final.id)
    assert (job.status, job.error) == (Status.FAILED, "bad input")


def test_progress_and_output_reach_the_job(worker: APIClient) -> None:
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker)
    progress = {"progress": {"done": 1, "total": 2}}
    assert report(worker, attempt["id"], "progress", progress).status_code == 200
    for index, text in [(1, "hello "), (2, "world"), (2, "world")]:
        body = {"index": index, "text": text}
        assert report(worker, attempt["id"], "output", body).status_code == 200
    assert report(worker, attempt["id"], "output", {"index": 2, "text": "x"}).status_code == 400
    assert handle.progress() == {"done": 1, "total": 2}
    assert "".join(handle.output()) == "hello world"


def test_output_is_numbered_without_gaps_across_attempts(worker: APIClient) -> None:
    """A piece numbered past the next one is refused: a number as high as 2**31 - 1 used to
    be stored, and the next attempt's output, numbered on from it, could not be."""
    retry_at_once = {"retry_count": 1, "initial_interval": 0, "randomize_interval": False}
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=retry_at_once)
    dispatch()
    [attempt] = claim(worker)
    for index, status in [(2**31 - 1, 400), (2, 400), (1, 200), (3, 400), (2, 200), (1, 200)]:
        response = report(worker, attempt["id"], "output", {"index": index, "text": f"{index} "})
        assert response.status_code == status, (index, response.content)
    assert (
        "index must be 3"
        in report(worker, attempt["id"], "output", {"index": 5, "text": "x"}).json()["text"][0]
    )
    assert report(worker, attempt["id"], "fail", {"error": "again"}).status_code == 200
    dispatch()
    [retry] = claim(worker, worker="w2")  # another worker: w1 would leave it to others a while
    assert retry["output_index"] == 3
    assert report(worker, retry["id"], "output", {"index": 3, "text": "3"}).status_code == 200
    assert "".join(handle.output()) == "1 2 3"


def test_heartbeat_extends_the_lease_and_says_canceled(worker: APIClient) -> None:
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker)
    before = Attempt.objects.get(pk=attempt["id"]).lease_expires_at
    answer = report(worker, attempt["id"], "heartbeat").json()
    assert answer["canceled"] is False
    assert Attempt.objects.get(pk=attempt["id"]).lease_expires_at >= before
    handle.cancel()
    dispatch()
    assert report(worker, attempt["id"], "heartbeat").json()["canceled"] is True


def lapse(attempt_id: int, key_silent_for: float | None = None) -> None:
    """Let the attempt's lease lapse a second ago; its key last heard ``key_silent_for``
    seconds before that (None: as the claim left it, after the lapse)."""
    lapsed = clock.now() - timedelta(seconds=1)
    Attempt.objects.filter(pk=attempt_id).update(lease_expires_at=lapsed)
    if key_silent_for is not None:
        last_seen = lapsed - timedelta(seconds=key_silent_for)
        WorkerKey.objects.update(last_seen=last_seen)
    else:
        WorkerKey.objects.update(last_seen=clock.now())


def recover() -> None:
    loop = leading_loop()
    loop.recovery.last_run = float("-inf")
    loop.run(30)


def test_a_lapsed_lease_is_lost_once_the_key_is_heard_and_retried(worker: APIClient) -> None:
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    dispatch()
    [attempt] = claim(worker)
    lapse(attempt["id"])  # its key was heard after: its worker dropped it
    recover()
    row = Attempt.objects.get(pk=attempt["id"])
    assert row.outcome == Outcome.WORKER_LOST
    assert Job.objects.get(pk=handle.id).status == Status.RETRYING
    for action, body in [
        ("heartbeat", {}),
        ("progress", {"progress": {"done": 1}}),
        ("output", {"index": 1, "text": "late"}),
        ("complete", {"result": 3}),
        ("fail", {"error": "late"}),
        ("release", {}),
    ]:
        assert report(worker, attempt["id"], action, body).status_code == 409, action
    assert (handle.output(), handle.progress()) == ([], None)


def test_a_late_report_is_taken_until_recovery_ends_the_attempt(worker: APIClient) -> None:
    """A lease that lapsed while its key was silent (the server away) is not lost: a late
    heartbeat renews it, a late report ends the attempt, which ran once (issue 31)."""
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    dispatch()
    [attempt] = claim(worker)
    lapse(attempt["id"], key_silent_for=60)
    recover()
    assert Attempt.objects.get(pk=attempt["id"]).ended_at is None
    assert report(worker, attempt["id"], "heartbeat").status_code == 200
    assert Attempt.objects.get(pk=attempt["id"]).lease_expires_at > clock.now()
    lapse(attempt["id"], key_silent_for=60)
    assert report(worker, attempt["id"], "complete", {"result": 3}).status_code == 200
    dispatch()
    assert handle.result(timeout=0) == 3
    assert Attempt.objects.filter(job_id=handle.id).count() == 1


def test_a_worker_back_from_an_outage_renews_the_leases_that_lapsed_meanwhile(
    worker: APIClient,
) -> None:
    """Its first request says how long the server was away for it: the key's leases that
    lapsed meanwhile get a fresh lease, so that the loop does not take them as lost before
    the worker holding them is back too (another worker of the key was back first)."""
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker)
    lapse(attempt["id"], key_silent_for=60)
    back = {"worker": "w2", "max": 0}
    response = worker.post(f"{API}claim/", back, format="json", HTTP_RATEQUEUE_AWAY="30.5")
    assert response.status_code == 200, response.content
    assert Attempt.objects.get(pk=attempt["id"]).lease_expires_at > clock.now()
    recover()
    assert Attempt.objects.get(pk=attempt["id"]).ended_at is None


def test_a_request_that_was_never_away_renews_nothing(worker: APIClient) -> None:
    """Another worker of the key, heard without an outage: the lapsed lease is lost."""
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    dispatch()
    [attempt] = claim(worker)
    lapse(attempt["id"], key_silent_for=60)
    for away in ("", "0", "nan", "-5", "soon"):
        response = worker.post(
            f"{API}claim/", {"worker": "w2", "max": 0}, format="json", HTTP_RATEQUEUE_AWAY=away
        )
        assert response.status_code == 200, response.content
    assert Attempt.objects.get(pk=attempt["id"]).lease_expires_at < clock.now()
    recover()
    assert Attempt.objects.get(pk=attempt["id"]).outcome == Outcome.WORKER_LOST


def test_a_lease_lapsed_for_many_leases_of_silence_is_lost(worker: APIClient) -> None:
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu", retries=1)
    dispatch()
    [attempt] = claim(worker)
    lease = ratequeue_settings().REMOTE_LEASE
    Attempt.objects.filter(pk=attempt["id"]).update(
        lease_expires_at=clock.now() - timedelta(seconds=lease * SILENT_LEASES + 1)
    )
    WorkerKey.objects.update(last_seen=clock.now() - timedelta(days=1))
    recover()
    assert Attempt.objects.get(pk=attempt["id"]).outcome == Outcome.WORKER_LOST


def test_a_released_attempt_is_claimable_at_once(worker: APIClient) -> None:
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker)
    assert report(worker, attempt["id"], "release").status_code == 200
    [again] = claim(worker, worker="w2")
    assert again["id"] == attempt["id"]


def test_keys_unknown_missing_or_revoked_are_401(gpu_key: tuple[WorkerKey, str]) -> None:
    row, key = gpu_key
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(keyed(key))
    prefix = key.split(".")[0]
    for client in [APIClient(), keyed("nonsense"), keyed(f"{prefix}.guessed"), keyed(key[:-1])]:
        assert client.post(f"{API}claim/", {"worker": "w"}, format="json").status_code == 401
    assert revoke(row.prefix)
    response = report(keyed(key), attempt["id"], "complete", {"result": 3})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Api-Key"
    assert Attempt.objects.get(pk=attempt["id"]).ended_at is None


def test_a_key_claims_only_from_its_queues(worker: APIClient) -> None:
    cpu_client = keyed(create_key("cpu box", ["cpu"])[1])
    gpu_job = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    assert claim(cpu_client) == []
    response = cpu_client.post(f"{API}claim/", {"worker": "w", "queues": ["gpu"]}, format="json")
    assert response.status_code == 403
    [attempt] = claim(worker)
    assert attempt["job_id"] == gpu_job.id
    # Another key's worker cannot report on it.
    assert report(cpu_client, attempt["id"], "complete", {"result": 0}).status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"max": "many"},
        {"max": 10**9},
        {"wait": -1},
        {"worker": "x" * 100},
        {"worker": "a b"},
        {"queues": "gpu"},
        {"running": ["%s"]},
        {"unknown": 1},
        {"reports": [{"id": 1, "action": "fail"}]},
        {"reports": [{"id": 1, "action": "cheer"}]},
        {"reports": [{"id": 1, "action": "complete", "extra": 1}]},
        {"reports": [{"action": "complete"}]},
        {"reports": {"id": 1}},
    ],
)
def test_malformed_claims_are_400(worker: APIClient, body: dict[str, Any]) -> None:
    response = worker.post(f"{API}claim/", {"worker": "w", **body}, format="json")
    assert response.status_code == 400, response.content


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("complete", {"result": 1, "more": 2}),
        ("complete", [1]),
        ("fail", {"error": ""}),
        ("fail", {"error": 3, "retryable": "perhaps"}),
        ("output", {"index": 0, "text": "x"}),
        ("output", {"index": 1, "text": "nul \x00"}),
        ("output", {"index": 1, "text": ""}),
        ("progress", {"progress": [1, 2]}),
        ("progress", {"progress": "done"}),
    ],
)
def test_malformed_reports_are_400_and_change_nothing(
    worker: APIClient, action: str, body: Any
) -> None:
    handle = enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(worker)
    response = report(worker, attempt["id"], action, body)
    assert response.status_code == 400, response.content
    row = Attempt.objects.get(pk=attempt["id"])
    assert (row.ended_at, handle.output(), handle.progress()) == (None, [], None)


def test_not_json_too_big_and_huge_ids(worker: APIClient, settings: Any) -> None:
    response = worker.post(f"{API}claim/", "worker=w", content_type="text/plain")
    assert response.status_code == 415
    for raw in ["{not json", '{"worker": "w", "wait": 1e309}', '{"worker": "w", "max": NaN}']:
        response = worker.post(f"{API}claim/", raw, content_type="application/json")
        assert response.status_code == 400, raw
    big = {"worker": "w", "host": "x" * (3 * 1024 * 1024)}
    assert worker.post(f"{API}claim/", big, format="json").status_code == 413
    assert report(worker, 10**30, "heartbeat").status_code == 409
    result = {"result": "x" * (2 * 1024 * 1024)}
    assert report(worker, 1, "complete", result).status_code in (409, 413)

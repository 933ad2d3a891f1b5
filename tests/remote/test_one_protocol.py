"""The one attempt protocol (queue/protocol), as local runners and remote workers both use
it: one claim statement that picks by priority for either kind, one report of a batch in
which a row the database refuses fails only its own attempt, and a remote report sent
again after its answer was lost."""

from __future__ import annotations

import os

import pytest
from rest_framework.test import APIClient

from django_ratequeue import JobFailed, enqueue, get_handle
from django_ratequeue.engine import protocol
from django_ratequeue.engine.execution import run_attempt
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Attempt, Outcome, WorkerKey
from tests.remote.conftest import API
from tests.remote.test_protocol import claim, dispatch

pytestmark = pytest.mark.usefixtures("remote_queues")
# What os.fsdecode() gives for a file name that is not UTF-8: jsonb cannot hold it.
SURROGATE = os.fsdecode(b"caf\xe9")


def test_one_claim_picks_by_priority_for_either_kind(gpu_key: tuple[WorkerKey, str]) -> None:
    """Local and remote attempts dispatched side by side, in mixed priorities: each kind's
    claims take only their own kind's, the highest priority first, then dispatch order."""
    local = {p: enqueue("tests.queue.jobs.add", args=[p, 0], priority=p).id for p in (1, 5, 3)}
    remote = {
        p: enqueue("tests.queue.jobs.add", args=[p, 0], priority=p, queue="gpu").id
        for p in (2, 9, 4)
    }
    dispatch()
    runner = protocol.Claimant(beat(force=True))
    instance = protocol.Claimant.remote(gpu_key[0], "w1")
    taken_locally = [protocol.claim_local(runner, 1)[0].job_id for _ in range(3)]
    taken_remotely = []
    for _ in range(3):
        claimed = protocol.claim_remote(instance, ["gpu"], [], 1, taken_remotely)
        taken_remotely.extend(a.pk for a in claimed.attempts)
    assert taken_locally == [local[5], local[3], local[1]]
    jobs = dict(Attempt.objects.filter(pk__in=taken_remotely).values_list("pk", "job_id"))
    assert [jobs[pk] for pk in taken_remotely] == [remote[9], remote[4], remote[2]]
    assert protocol.claim_local(runner, 5) == []
    assert protocol.claim_remote(instance, ["gpu"], [], 5, taken_remotely).attempts == []


@pytest.mark.postgres_only
def test_a_local_batch_with_one_refused_row_fails_that_attempt_alone(db: None) -> None:
    handles = [enqueue("tests.queue.jobs.add", args=[n, n], retries=0).id for n in range(3)]
    dispatch()
    runner = protocol.Claimant(beat(force=True))
    ended = [run_attempt(attempt) for attempt in protocol.claim_local(runner, 3)]
    bad = ended[1]
    ended[1] = protocol.Ended(
        bad.attempt_id, bad.report.unchecked(result=SURROGATE), bad.ended_at, bad.started_at
    )

    assert protocol.report(runner, ended) == {}  # a local runner needs no answer
    dispatch()

    refused = Attempt.objects.get(pk=bad.attempt_id)
    assert refused.outcome == Outcome.FAILED
    assert refused.error.startswith("The database refused this attempt's outcome")
    for job_id in handles:
        if job_id != refused.job_id:
            assert get_handle(job_id).result(timeout=0) == 2 * handles.index(job_id)
    with pytest.raises(JobFailed, match="Unicode low surrogate"):
        get_handle(refused.job_id).result(timeout=0)


@pytest.mark.postgres_only
def test_a_remote_batch_with_one_refused_row_fails_that_attempt_alone(
    worker: APIClient, gpu_key: tuple[WorkerKey, str]
) -> None:
    handles = [enqueue("tests.queue.jobs.add", args=[n, n], queue="gpu").id for n in range(3)]
    dispatch()
    ids = [attempt["id"] for attempt in claim(worker)]
    reports = [protocol.Report.returned(n) for n in range(3)]
    reports[1] = reports[1].unchecked(result=SURROGATE)
    claimant = protocol.Claimant.remote(gpu_key[0], "w1")

    answers = protocol.report(claimant, list(map(protocol.Ended, ids, reports)))

    assert [answers[i] for i in (ids[0], ids[2])] == [reports[0], reports[2]]
    refused = answers[ids[1]]
    assert refused is not None and refused.outcome == Outcome.FAILED
    assert "Unicode low surrogate" in refused.error
    stored = Attempt.objects.get(pk=ids[1])
    assert (stored.outcome, stored.error, stored.result) == (Outcome.FAILED, refused.error, None)
    assert len(handles) == 3


def test_a_remote_batch_sent_again_after_a_lost_answer_changes_nothing(
    worker: APIClient,
) -> None:
    """The reports of a claim, sent again (the worker never saw the answer): answered the
    same, nothing written twice; a different outcome for the same attempt is a 409."""
    handles = [enqueue("tests.queue.jobs.add", args=[n, n], queue="gpu").id for n in range(2)]
    dispatch()
    first, second = (attempt["id"] for attempt in claim(worker))
    reports = [
        {"id": first, "action": "complete", "result": 0},
        {"id": second, "action": "fail", "error": "boom", "retryable": False},
    ]

    def send(reports: list[dict[str, object]]) -> list[dict[str, object]]:
        body = {"worker": "w1", "max": 0, "reports": reports}
        response = worker.post(f"{API}claim/", body, format="json")
        assert response.status_code == 200, response.content
        return response.json()["reports"]

    answered = send(reports)
    ended = dict(Attempt.objects.filter(pk__in=[first, second]).values_list("pk", "ended_at"))
    assert (
        send(reports)
        == answered
        == [
            {"id": first, "status": 200, "detail": ""},
            {"id": second, "status": 200, "detail": ""},
        ]
    )
    assert dict(Attempt.objects.filter(pk__in=[first, second]).values_list("pk", "ended_at")) == (
        ended
    )
    [changed] = send([{"id": first, "action": "complete", "result": 1}])
    assert changed["status"] == 409
    dispatch()
    assert get_handle(handles[0]).result(timeout=0) == 0
    with pytest.raises(JobFailed, match="boom"):
        get_handle(handles[1]).result(timeout=0)

"""The example project's queue page: bursts of jobs, their live statuses, cancel."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_ratequeue import Status
from django_ratequeue.models import CancelRequest, Job
from tests.cluster import wait_for
from tests.queue.steps import run_pass

FINAL = {Status.COMPLETE, Status.FAILED, Status.CANCELED}


def state(client: Client) -> dict[str, Any]:
    response = client.get("/queue/state.json")
    assert response.status_code == 200
    return response.json()


@pytest.mark.django_db
def test_home_links_the_queue_page_which_offers_every_burst(client: Client) -> None:
    assert "/queue/" in client.get("/").content.decode()

    page = client.get("/queue/").content.decode()

    for kind in ["fast", "slow", "flaky", "broken", "emails", "llm"]:
        assert f'name="kind" value="{kind}"' in page
    assert "/queue/state.json" in page  # polled by the page's script


@pytest.mark.django_db
def test_a_burst_is_enqueued_and_listed_with_the_counts(client: Client) -> None:
    response = client.post("/queue/enqueue/", {"kind": "emails"}, follow=True)

    assert "Enqueued 6 e-mails" in response.content.decode()
    data = state(client)
    emails = next(q for q in data["queues"] if q["name"] == "emails")
    assert emails["counts"]["waiting"] == 6
    assert emails["limit"] == 2
    assert [j["function"] for j in data["jobs"]] == ["send_email"] * 6
    assert data["jobs"][0]["args"] == ["user6@example.com"]  # newest first


@pytest.mark.django_db
def test_unknown_burst_is_refused_and_writes_nothing(client: Client) -> None:
    response = client.post("/queue/enqueue/", {"kind": "everything"}, follow=True)

    assert (
        "Pick one of: fast, slow, flaky, broken, emails, llm, remote, batch."
        in response.content.decode()
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_cancel_button_files_a_cancel_request(client: Client) -> None:
    client.post("/queue/enqueue/", {"kind": "slow"})
    job_id = state(client)["jobs"][0]["id"]

    response = client.post(f"/queue/jobs/{job_id}/cancel/")

    assert response.json() == {"id": job_id, "cancel_requested": True}
    assert list(CancelRequest.objects.values_list("job_id", flat=True)) == [job_id]
    assert client.post("/queue/jobs/no-such-job/cancel/").status_code == 404


def test_bursts_run_on_the_cluster_to_complete_or_failed(client: Client, cluster) -> None:
    cluster()
    for kind in ["fast", "flaky", "broken"]:
        client.post("/queue/enqueue/", {"kind": kind})

    def all_finished() -> list[dict[str, Any]] | None:
        jobs = state(client)["jobs"]
        return jobs if all(j["status"] in FINAL for j in jobs) else None

    jobs = wait_for(all_finished, timeout=60, message="every demo job to finish")

    outcomes = sorted({(j["function"], j["status"], j["attempts"]) for j in jobs})
    assert outcomes == [
        ("broken", "failed", 3),
        ("fast", "complete", 1),
        ("flaky", "complete", 3),
    ]
    assert sorted(j["result"] for j in jobs if j["function"] == "fast") == [
        n * n for n in range(1, 11)
    ]
    assert {j["error"] for j in jobs if j["function"] == "broken"} == {
        "ValueError: invoice 7 cannot be processed",
        "ValueError: invoice 8 cannot be processed",
    }
    totals = state(client)["totals"]
    assert (totals["complete"], totals["failed"]) == (13, 2)


@pytest.mark.django_db
def test_the_job_table_says_when_it_shows_only_the_latest(client: Client) -> None:
    client.post("/queue/enqueue/", {"kind": "emails"})
    assert state(client)["more_jobs"] is False

    for _ in range(4):
        client.post("/queue/enqueue/", {"kind": "fast"})  # 6 + 40 jobs

    data = state(client)
    assert (len(data["jobs"]), data["more_jobs"]) == (40, True)
    page = client.get("/queue/").content.decode()
    assert "Only the latest" in page  # the script's note, drawn from more_jobs


@pytest.mark.django_db
def test_the_page_tells_dispatched_from_running_and_asks_for_no_favicon(client: Client) -> None:
    page = client.get("/queue/").content.decode()

    assert "<th>waiting</th><th" in page and ">dispatched</th><th>running</th>" in page
    assert '<link rel="icon" href="data:,">' in page
    assert client.get("/favicon.ico").status_code == 204  # the admin's pages ask for it
    counts = state(client)["queues"][0]["counts"]
    assert list(counts)[:4] == ["scheduled", "waiting", "dispatched", "running"]


@pytest.mark.django_db(transaction=True)
def test_the_batch_burst_shows_its_progress_to_the_end(client: Client) -> None:
    assert state(client)["batch"] is None
    response = client.post("/queue/enqueue/", {"kind": "batch"}, follow=True)
    assert "Enqueued A batch of 8 fast jobs" in response.content.decode()
    shown = state(client)["batch"]
    assert (shown["done"], shown["total"], shown["finished"]) == (0, 8, False)
    run_pass()
    run_pass()
    shown = state(client)["batch"]
    assert (shown["done"], shown["total"], shown["finished"]) == (8, 8, True)
    assert 'id="batch"' in client.get("/queue/").content.decode()

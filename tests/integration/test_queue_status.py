"""``manage.py ratequeue_status``: jobs per queue and status, the loop and its workers."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_ratequeue import Status, enqueue
from django_ratequeue.models import Attempt, Job
from django_ratequeue.queue import stats
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop


def status(*args: str) -> str:
    out = StringIO()
    call_command("ratequeue_status", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_table_counts_jobs_per_queue_and_status() -> None:
    enqueue(jobs.add, args=[1, 2])
    enqueue(jobs.add, args=[1, 2], run_after=timedelta(hours=1))
    for _ in range(3):
        enqueue(jobs.echo, queue="emails")
    enqueue(jobs.echo, queue={"name": "reports", "max_concurrency": 3})

    lines = status().splitlines()

    assert lines[0].split() == [
        "QUEUE", "LIMIT", "SCHEDULED", "WAITING", "DISPATCHED", "RUNNING", "RETRYING", "FAILED",
        "COMPLETE", "CANCELED",
    ]  # fmt: skip
    # With the example project's "llm" and "remote".
    rows = {line.split()[0]: line for line in lines[1:7]}
    assert rows["default"].split() == ["default", "8", "(MAX_CONCURRENCY)", "1", "1"] + ["0"] * 6
    assert rows["emails"].split() == ["emails", "2", "0", "3"] + ["0"] * 6
    assert (
        rows["reports"].split() == ["reports", "3", "(set", "at", "runtime)", "0", "1"] + ["0"] * 6
    )
    assert rows["(all)"].split() == ["(all)", "1", "5"] + ["0"] * 6
    # Counts are right-aligned under their headers.
    assert {len(line) for line in lines[:7]} == {len(lines[0])}
    assert "Main loop: idle, generation 0" in lines
    assert "Live workers: none (is manage.py qcluster running?)" in lines


@pytest.mark.django_db
def test_json_for_machines() -> None:
    enqueue(jobs.echo, queue="emails")

    data = json.loads(status("--json"))

    emails = next(q for q in data["queues"] if q["name"] == "emails")
    assert emails == {
        "name": "emails",
        "limit": 2,
        "limit_note": "",
        "limit_label": "2",
        "counts": {
            "scheduled": 0,
            "waiting": 1,
            "dispatched": 0,
            "running": 0,
            "retrying": 0,
            "failed": 0,
            "complete": 0,
            "canceled": 0,
        },
        "capped": [],
    }
    assert data["totals"]["waiting"] == 1
    assert data["loop"]["state"] == "idle"
    assert data["workers"] == []


def test_shows_the_loop_and_live_workers(cluster) -> None:
    cluster(workers=2)
    assert enqueue(jobs.add, args=[2, 2]).result(timeout=30) == 4

    # With nothing left to do the loop comes to rest, so both outputs see the same state.
    data = wait_for(
        lambda: (d := json.loads(status("--json")))["loop"]["state"] == "idle" and d,
        message="the loop to rest",
    )
    text = status()

    assert data["totals"]["complete"] == 1
    assert data["loop"]["generation"] >= 1
    assert f"Main loop: idle, generation {data['loop']['generation']}" in text
    assert len(data["workers"]) == 2
    assert "Live workers: 2" in text
    for worker in data["workers"]:
        assert f"pid {worker['pid']}" in text


@pytest.mark.django_db
def test_limits_say_where_they_come_from(settings) -> None:
    settings.RATEQUEUE = {
        **settings.RATEQUEUE,
        "QUEUES": {"emails": {"max_concurrency": 2}, "exports": {"paused": True}},
    }
    enqueue(jobs.echo, queue="adhoc")

    limits = {line.split()[0]: line.split()[1:-8] for line in status().splitlines()[1:5]}

    assert limits == {
        "adhoc": ["1", "(not", "configured)"],
        "default": ["8", "(MAX_CONCURRENCY)"],
        "emails": ["2"],
        "exports": ["paused"],
    }


@pytest.mark.django_db
def test_dispatched_jobs_are_told_from_running_ones() -> None:
    """A job handed to a worker that has not started it is "dispatched", not "running"."""
    enqueue(jobs.add, args=[1, 2])
    enqueue(jobs.add, args=[3, 4])
    loop = leading_loop()
    loop.step()  # dispatches both; no worker has claimed either
    first = Attempt.objects.order_by("pk").first()
    assert first is not None
    # A worker claims one, as the runner's conditional UPDATE does.
    Attempt.objects.filter(pk=first.pk).update(started_at=timezone.now(), worker="w1")

    data = json.loads(status("--json"))

    default = next(q for q in data["queues"] if q["name"] == "default")
    assert (default["counts"]["dispatched"], default["counts"]["running"]) == (1, 1)
    row = next(line for line in status().splitlines() if line.startswith("default"))
    assert row.split()[3:7] == ["0", "0", "1", "1"]  # scheduled, waiting, dispatched, running


@pytest.mark.django_db
def test_counts_stop_at_the_limit_instead_of_reading_all_history(monkeypatch) -> None:
    monkeypatch.setattr(stats, "COUNT_LIMIT", 3)
    now = timezone.now()
    Job.objects.bulk_create(
        Job(id=f"done-{n}", func="tests.queue.jobs.add", queue="emails", status=Status.COMPLETE,
            start_at=now, created_at=now, finished_at=now, retry={})
        for n in range(5)
    )  # fmt: skip
    enqueue(jobs.echo, queue="emails")

    data = json.loads(status("--json"))

    emails = next(q for q in data["queues"] if q["name"] == "emails")
    assert (emails["counts"]["complete"], emails["capped"]) == (3, ["complete"])
    assert emails["counts"]["waiting"] == 1
    assert data["totals_capped"] == ["complete"]
    text = status()
    assert (
        next(line for line in text.splitlines() if line.startswith("emails")).split()[-2] == "3+"
    )
    assert "Counts stop at 3" in text

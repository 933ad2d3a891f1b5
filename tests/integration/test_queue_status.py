"""``manage.py ratequeue_status``: jobs per queue and status, the loop and its workers."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_ratequeue import Status, clock, enqueue
from django_ratequeue.management.commands import ratequeue_status
from django_ratequeue.management.commands.ratequeue_status import CLEAR
from django_ratequeue.models import Attempt, Job, QueueMinute
from django_ratequeue.monitor import counts as monitor_counts
from django_ratequeue.plugins.rollups.counting import floor_minute
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
    assert "Main loop: idle (no worker is alive to run it), generation 0" in lines
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
    # Read them until they do: on a loaded machine the resting leader's lease can lapse for
    # a moment between the two reads, and the text then says so.
    def resting() -> tuple[dict[str, Any], str] | None:
        data = json.loads(status("--json"))
        if data["loop"]["state"] != "idle" or data["loop"]["lease_lapsed"]:
            return None
        text = status()
        return (data, text) if "Main loop: idle, generation" in text else None

    data, text = wait_for(resting, message="the loop to rest, in both outputs")

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
    monkeypatch.setattr(monitor_counts, "COUNT_LIMIT", 3)
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


@pytest.mark.django_db
def test_watch_draws_frames_with_the_last_minute(settings: Any) -> None:
    settings.RATEQUEUE = {
        **settings.RATEQUEUE,
        "RATE_LIMITS": {"smtp": {"kind": "token bucket", "rate": 1, "period": 60}},
        "QUEUES": {"emails": {"max_concurrency": 2, "rate_limit": "smtp"}, "slow": {}},
    }
    enqueue(jobs.echo, queue="emails")
    running = enqueue(jobs.echo, queue="slow")
    enqueue(jobs.echo, queue="slow")
    Job.objects.filter(pk=running.id).update(status=Status.RUNNING)
    last_minute = floor_minute(clock.now()) - timedelta(minutes=1)
    # 7 waits in [0.512 s, 1.024 s), 6 runs in [2.048 s, 4.096 s).
    QueueMinute.objects.create(
        queue="emails", minute=last_minute, started=7, completed=5, failed=1, wait_h10=7, run_h12=6
    )
    QueueMinute.objects.create(queue="slow", minute=last_minute - timedelta(minutes=1), started=3)

    out = status("--watch", "--frames", "2", "--interval", "0.01")

    frames = out.split("ratequeue_status at ")[1:]
    assert len(frames) == 2 and CLEAR not in out  # not a terminal: one frame after the other
    lines = frames[0].splitlines()
    assert lines[1].endswith("STARTED/MIN  DONE/MIN  FAILED/MIN  WAIT P95  RUN P95  STATE")
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.strip()}
    assert rows["emails"][-8:] == ["7", "5", "1", "975ms", "3.9s", "rate", "limit", "smtp"]
    # Its minute is not the last one: zeros; one job runs, the other waits for its slot.
    assert rows["slow"][-6:] == ["0", "0", "0", "-", "-", "saturated"]
    assert rows["(all)"][-3:] == ["7", "5", "1"]


@pytest.mark.parametrize("interval", ["0", "-1", "inf", "nan", "3601", "soon"])
def test_watch_refuses_an_interval_it_cannot_keep(interval: str) -> None:
    with pytest.raises(CommandError, match="--interval"):
        status("--watch", "--interval", interval)


def test_watch_does_not_go_with_json() -> None:
    with pytest.raises(CommandError, match="does not go with --watch"):
        status("--watch", "--json")


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.django_db
def test_watch_redraws_a_terminal_until_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    def ctrl_c(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ratequeue_status.time, "sleep", ctrl_c)
    out = Terminal()
    call_command("ratequeue_status", "--watch", stdout=out)  # returns: no traceback
    assert out.getvalue().startswith(CLEAR + "ratequeue_status at ")
    assert out.getvalue().count("ratequeue_status at ") == 1

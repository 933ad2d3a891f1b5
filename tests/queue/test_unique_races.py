"""Real processes race to enqueue one unique key, on PostgreSQL and on SQLite; a real
cluster runs a debounced burst.

unique_for writes exactly one job; debounce leaves exactly one job not started, holding
some contender's last call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_ratequeue import Status
from django_ratequeue.models import Job, UniqueClaim
from tests.cluster import database_url
from tests.queue import jobs

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 6
CALLS = 15

pytestmark = pytest.mark.django_db(transaction=True)


def race(mode: str) -> list[list[str]]:
    """Start the contenders, release them together, and return the ids each got back.

    They must have overlapped in time: each began before any ended."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
    }
    contenders = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.queue.unique_contender", mode, str(index), str(CALLS)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(PROCESSES)
    ]
    try:
        for contender in contenders:
            assert contender.stdout is not None and contender.stdout.readline() == "ready\n"
        for contender in contenders:  # the start barrier: everyone is connected
            assert contender.stdin is not None
            contender.stdin.write("go\n")
            contender.stdin.flush()
        outputs = [contender.communicate(timeout=120)[0] for contender in contenders]
    finally:
        for contender in contenders:
            contender.kill()
    assert all(contender.returncode == 0 for contender in contenders)
    reports = [json.loads(output) for output in outputs]
    assert max(r["began"] for r in reports) < min(r["ended"] for r in reports)
    return [report["ids"] for report in reports]


def test_racing_processes_write_one_job_for_a_unique_key() -> None:
    ids = race("unique_for")
    (row,) = Job.objects.all()
    assert {job_id for got in ids for job_id in got} == {row.id}
    assert UniqueClaim.objects.get().job_id == row.id
    assert row.kwargs["call"] == 0  # the first call of its winner: the others wrote nothing


def test_racing_processes_take_an_expired_window_over_once() -> None:
    old = jobs.echo.using(unique_for=600, unique_key="race").enqueue(index=-1, call=-1)
    UniqueClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    ids = race("unique_for")
    (new,) = Job.objects.exclude(pk=old.id)
    assert {job_id for got in ids for job_id in got} == {new.id}
    assert UniqueClaim.objects.get().job_id == new.id


def test_racing_processes_debounce_into_one_job_with_a_last_call() -> None:
    ids = race("debounce")
    (row,) = Job.objects.all()
    assert row.status == Status.SCHEDULED
    assert {job_id for got in ids for job_id in got} == {row.id}
    # Each contender's calls are in order, so the last write is one contender's last call.
    assert row.kwargs["call"] == CALLS - 1
    assert UniqueClaim.objects.get().job_id == row.id


def test_a_cluster_runs_a_debounced_burst_once_with_its_last_call(cluster: Any) -> None:
    cluster()
    burst = jobs.echo.using(debounce=3, unique_key="burst")
    handles = [burst.enqueue(call=call) for call in range(5)]
    assert {handle.id for handle in handles} == {handles[0].id}
    assert handles[0].result(timeout=60) == {"args": [], "kwargs": {"call": 4}}
    assert burst.enqueue(call=5).id != handles[0].id  # it ran: a new burst
    assert Job.objects.count() == 2

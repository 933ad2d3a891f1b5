"""Deploys never fail a job: a job whose function a worker does not know is no try there.

It waits, visibly, for a worker that knows it, and fails with ``UnknownJob`` only after
``UNKNOWN_JOB_PATIENCE`` with none (docs/concepts.md, "Deploys"). In this process, step
by step, then with two real clusters of different ``JOB_MODULES`` on one database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from django.test import Client

from django_ratequeue import Status, UnknownJob
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import registry
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.knowing import unknown_functions
from django_ratequeue.engine.models import Outcome
from django_ratequeue.engine.protocol import claim_local
from django_ratequeue.engine.runner import Runner
from django_ratequeue.exceptions import class_path
from django_ratequeue.models import Attempt, Job
from tests.cluster import ROOT, wait_for
from tests.queue import deploy_jobs, jobs
from tests.queue.steps import Clock, freeze, leading_loop

NEW = "tests.queue.deploy_jobs.new_job"
NOTE = f"no running worker knows `{NEW}`"
JOBS = "/admin/django_ratequeue/job/"


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


def know_new_job(monkeypatch: pytest.MonkeyPatch, known: bool) -> None:
    """Make this process an older deploy's, that does not know ``new_job``, or a newer one's."""
    kept = {path: job for path, job in registry._jobs.items() if path != NEW}
    monkeypatch.setattr(registry, "_jobs", {**kept, NEW: deploy_jobs.new_job} if known else kept)
    monkeypatch.setattr(registry, "_known", None)


def settle(clock: Clock, seconds: float = 0.0) -> None:
    """Move the clock, keep this process's worker alive, and step the loop until it rests."""
    clock.advance(seconds)
    beat(force=True)
    leading_loop().run(30)


def attempts_of(job_id: str) -> list[tuple[Any, ...]]:
    return list(
        Attempt.objects.filter(job_id=job_id)
        .order_by("pk")
        .values_list("worker", "started_at", "ended_at", "outcome")
    )


@pytest.mark.django_db(transaction=True)
def test_a_job_no_worker_knows_is_no_try_and_starts_once_a_worker_knows_it(
    monkeypatch: pytest.MonkeyPatch, frozen: Clock, admin_client: Client
) -> None:
    handle = deploy_jobs.new_job.enqueue(21)  # by a web process of the newer deploy
    know_new_job(monkeypatch, known=False)  # ...while the workers run the older one
    runner = Runner(beat(force=True))
    settle(frozen)

    assert runner.drain() == 0  # it claims only what it knows
    [(worker, started, ended, _)] = attempts_of(handle.id)
    assert (worker, started, ended) == ("", None, None)

    # A claim that took it all the same (a process that lost the job since it said what
    # it knows) hands it back: no try, nothing held.
    [claimed] = claim_local(runner.claimant, 1)
    runner.start(claimed)
    assert runner.held == {}
    assert attempts_of(handle.id) == [("", None, None, "")]

    # Long after WORKER_DEAD_AFTER: still its one attempt, waiting, and it says why.
    settle(frozen, ratequeue_settings().WORKER_DEAD_AFTER + 1)
    settle(frozen, 600)
    assert attempts_of(handle.id) == [("", None, None, "")]
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.attempts, job.error) == (Status.RUNNING, 1, "")
    eta = handle.eta()
    assert (eta.basis, eta.note) == ("no_worker", NOTE)
    assert unknown_functions(frozen.now()) == [(NEW, 1)]
    assert NOTE in admin_client.get(f"{JOBS}{handle.id}/change/").content.decode()
    assert NOTE in admin_client.get(f"{JOBS}{handle.id}/live/").json()["fields"]["waiting_for"]
    dashboard = admin_client.get(f"{JOBS}dashboard/").content.decode()
    assert f"no running worker knows <code>{NEW}</code>" in dashboard
    with pytest.raises(TimeoutError, match=f"{NOTE}. It starts as soon as a worker"):
        handle.result(timeout=0)

    know_new_job(monkeypatch, known=True)  # a worker of the newer deploy comes
    assert Runner(beat(force=True)).drain() == 1
    assert NOTE not in admin_client.get(f"{JOBS}{handle.id}/change/").content.decode()
    settle(frozen)
    assert handle.result(timeout=5) == 42
    [(_, started, _, outcome)] = attempts_of(handle.id)
    assert started is not None and outcome == Outcome.SUCCEEDED
    assert Job.objects.get(pk=handle.id).attempts == 1
    assert unknown_functions(frozen.now()) == []


@pytest.mark.django_db(transaction=True)
def test_after_the_patience_with_no_worker_that_knows_it_the_job_fails_unknown(
    monkeypatch: pytest.MonkeyPatch, frozen: Clock, settings: Any
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "UNKNOWN_JOB_PATIENCE": 60}
    handle = deploy_jobs.new_job.enqueue(21)
    innocent = jobs.add.enqueue(1, 2)
    know_new_job(monkeypatch, known=False)
    settle(frozen)
    Runner(beat(force=True)).drain()
    settle(frozen)
    assert innocent.result(timeout=5) == 3

    settle(frozen, 59)
    assert handle.status() == Status.RUNNING
    assert attempts_of(handle.id) == [("", None, None, "")]

    settle(frozen, 2)
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.attempts) == (Status.FAILED, 1)
    assert job.exception_class_path == class_path(UnknownJob)
    assert job.error.startswith(
        f"Unknown job function '{NEW}': no running worker knew it for 60 seconds"
    )
    [(_, started, ended, outcome)] = attempts_of(handle.id)
    assert (started, outcome) == (None, Outcome.NON_RETRYABLE) and ended is not None


def test_start_up_registers_the_jobs_of_installed_apps_tasks_modules() -> None:
    """A fresh process: django.setup() alone registers the jobs of an app's tasks.py."""
    script = (
        "import django, json; django.setup(); "
        "from django_ratequeue.engine.registry import registered_job; "
        "print(json.dumps(registered_job('tests.tasks_app.tasks.tidy').path))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "tests.tasks_app.tasks.tidy"


def test_a_newer_deploys_job_waits_for_the_newer_cluster_and_runs_once(
    cluster: Any, settings: Any
) -> None:
    """Two clusters on one database, the newer with one more job module: a job only the
    newer knows, enqueued while only the older runs, waits without failing; it completes
    once, as soon as the newer cluster runs."""
    modules = list(settings.RATEQUEUE["JOB_MODULES"])
    older = cluster(workers=1, WORKER_DEAD_AFTER=2.0)
    handle = deploy_jobs.new_job.enqueue(21)
    assert jobs.add.enqueue(20, 22).result(timeout=30) == 42  # the older one works

    wait_for(lambda: attempts_of(handle.id), message="the job to be dispatched")
    watched_until = time.monotonic() + 4.0  # two WORKER_DEAD_AFTER: recovery looked at it
    while time.monotonic() < watched_until:
        assert [(w, s, e) for w, s, e, _ in attempts_of(handle.id)] == [("", None, None)]
        assert handle.status() == Status.RUNNING
        time.sleep(0.2)
    assert handle.eta().note == NOTE
    assert "Handing back" not in older.output()  # never offered to it: no claim, no hand-back

    cluster(workers=1, WORKER_DEAD_AFTER=2.0, JOB_MODULES=[*modules, "tests.queue.deploy_jobs"])
    assert handle.result(timeout=60) == 42
    [(_, started, _, outcome)] = attempts_of(handle.id)
    assert started is not None and outcome == Outcome.SUCCEEDED
    assert Job.objects.get(pk=handle.id).attempts == 1
    assert older.process.poll() is None, older.output()

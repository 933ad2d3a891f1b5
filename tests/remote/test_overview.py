"""Remote workers in the queue overview: ``ratequeue_status`` (text and ``--json``) and
the admin's page list each key's workers, where and when last seen, what they run."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from django_ratequeue import enqueue
from django_ratequeue.engine.models import WorkerKey
from tests.remote.test_protocol import claim, dispatch

pytestmark = pytest.mark.usefixtures("remote_queues")


@pytest.fixture
def running(worker: APIClient, gpu_key: tuple[WorkerKey, str]) -> WorkerKey:
    """Worker instance ``w1`` on host ``box-1`` runs one attempt of ``gpu_key``."""
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    assert len(claim(worker, worker="w1", host="box-1")) == 1
    return WorkerKey.objects.get(pk=gpu_key[0].pk)


def test_ratequeue_status_lists_remote_workers(running: WorkerKey) -> None:
    out = StringIO()
    call_command("ratequeue_status", stdout=out)
    text = out.getvalue()
    assert f"{running.prefix} gpu box (gpu)  last seen 20" in text
    assert "from box-1  running 1" in text
    assert "    worker w1  running 1" in text


def test_ratequeue_status_json_lists_remote_workers(running: WorkerKey) -> None:
    out = StringIO()
    call_command("ratequeue_status", "--json", stdout=out)
    [remote] = json.loads(out.getvalue())["remote_workers"]
    assert remote["last_seen"] == running.last_seen.isoformat()
    del remote["last_seen"]
    assert remote == {
        "key": "gpu box",
        "prefix": running.prefix,
        "queues": ["gpu"],
        "host": "box-1",
        "running": 1,
        "instances": {"w1": 1},
    }


def test_the_admin_overview_lists_remote_workers(running: WorkerKey, admin_client: Client) -> None:
    page = admin_client.get("/admin/django_ratequeue/job/overview/").content.decode()
    assert "Remote workers" in page
    assert f"gpu box ({running.prefix}…)" in page
    assert "1: 1 on w1" in page and "box-1" in page

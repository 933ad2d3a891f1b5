"""Worker keys: stored hashed, shown once, revoked at once; the command and the admin."""

from __future__ import annotations

import hashlib
import re
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client

from django_ratequeue import enqueue
from django_ratequeue.engine.heartbeat import beat, worker_id
from django_ratequeue.engine.models import Attempt, WorkerKey
from django_ratequeue.engine.runner import Runner
from django_ratequeue.engine.workerkeys import create_key, find_key
from tests.remote.conftest import keyed
from tests.remote.test_protocol import claim, dispatch

pytestmark = pytest.mark.django_db


def test_only_the_hash_and_prefix_are_stored() -> None:
    row, key = create_key("box", ["gpu"])
    prefix, secret = key.split(".")
    assert row.prefix == prefix and len(secret) >= 40
    assert row.hashed == hashlib.sha256(key.encode()).hexdigest()
    assert secret not in str(WorkerKey.objects.filter(pk=row.pk).values().get())
    assert find_key(key) == row
    assert find_key(f"{prefix}.{'x' * len(secret)}") is None
    assert find_key("%s" * 1000) is None


def test_a_key_needs_a_name_and_queues() -> None:
    with pytest.raises(ValueError, match="name"):
        create_key(" ", ["gpu"])
    with pytest.raises(ValueError, match="queue"):
        create_key("box", [])


def test_the_command_creates_lists_and_revokes() -> None:
    out = StringIO()
    call_command(
        "ratequeue_worker_key",
        "create",
        "gpu box",
        "--queues",
        "gpu",
        stdout=out,
        stderr=StringIO(),
    )
    key = out.getvalue().strip()
    row = find_key(key)
    assert row is not None and row.queues == ["gpu"]
    listed = StringIO()
    call_command("ratequeue_worker_key", "list", stdout=listed)
    assert row.prefix in listed.getvalue() and key not in listed.getvalue()
    call_command("ratequeue_worker_key", "revoke", row.prefix, stdout=StringIO())
    row.refresh_from_db()
    assert row.revoked_at is not None
    with pytest.raises(CommandError):
        call_command("ratequeue_worker_key", "revoke", row.prefix)


def test_the_admin_shows_a_new_key_once_on_its_page_never_in_a_cookie() -> None:
    User.objects.create_superuser("admin", password="admin")
    client = Client()
    client.login(username="admin", password="admin")
    url = "/admin/django_ratequeue/workerkey/"
    response = client.post(f"{url}add/", {"name": "box", "queues": "gpu, cpu"})
    assert response.status_code == 200  # the page itself, no redirect
    assert "no-store" in response["Cache-Control"]
    row = WorkerKey.objects.get()
    assert row.queues == ["cpu", "gpu"]
    page = response.content.decode()
    key = re.search(r'value="([0-9a-f]{8}\.[^"]+)"', page)[1]  # type: ignore[index]
    assert find_key(key) == row
    cookies = [morsel.value for morsel in response.cookies.values()]
    cookies += [morsel.value for morsel in client.cookies.values()]
    assert not any(key in value or key[:20] in value for value in cookies)
    assert not list(get_messages(response.wsgi_request))
    assert key not in client.get(url).content.decode()
    client.post(url, {"action": "revoke_keys", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.revoked_at is not None


def test_ratequeue_status_shows_remote_workers() -> None:
    row, _key = create_key("gpu box", ["gpu"])
    out = StringIO()
    call_command("ratequeue_status", stdout=out)
    assert f"{row.prefix} gpu box (gpu)  last seen -  running 0" in out.getvalue()


@pytest.mark.usefixtures("remote_queues")
@pytest.mark.parametrize("name", ["gpu box", "a:b/c:d/", "x" * 200])
@pytest.mark.parametrize("instance", ["w1", "w" * 32])
def test_a_claim_records_its_key_and_instance_in_columns(name: str, instance: str) -> None:
    """Whatever the key's name holds: the key is a column, the instance another."""
    row, key = create_key(name, ["gpu"])
    enqueue("tests.queue.jobs.add", args=[1, 2], queue="gpu")
    dispatch()
    [attempt] = claim(keyed(key), worker=instance)
    stored = Attempt.objects.select_related("worker_key").get(pk=attempt["id"])
    assert (stored.worker_key, stored.worker) == (row, instance)
    assert stored.worker_label == f"{name}/{instance}"


def test_a_local_runner_s_attempts_name_no_key() -> None:
    enqueue("tests.queue.jobs.add", args=[1, 2])
    dispatch()
    [attempt] = Runner(beat(force=True)).claim()
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.worker_key, stored.worker) == (None, worker_id())
    assert stored.worker_label == worker_id()

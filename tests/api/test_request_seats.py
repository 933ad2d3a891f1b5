"""No user ties up the server: event streams open at once per user, and claims waiting
for work at once per worker key, are capped across processes (rows in the database),
with a 429 that says so; a seat is freed when its request ends, or lapses if its
process died."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from django_ratequeue.api.sse import LIFETIME
from django_ratequeue.engine.bell import bell
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import RequestSeat
from django_ratequeue.seats import MARGIN, take_seat
from tests.api.conftest import API, enqueue

GPU = {"gpu": {"max_concurrency": 8, "remote": True}}


pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("background_threads_stop"),
]


def capped(**changes: Any) -> Any:
    return override_settings(RATEQUEUE={**settings.RATEQUEUE, **changes})


def open_stream(client: APIClient, job_id: str) -> Any:
    return client.get(f"{API}jobs/{job_id}/events/", HTTP_ACCEPT="text/event-stream")


def test_a_user_has_at_most_so_many_streams_open(api: APIClient, other: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    bob_job = enqueue(other, "tests.api.jobs.greet", args=["Bob"]).json()["id"]
    with capped(API_MAX_STREAMS_PER_USER=2):
        streams = [open_stream(api, job_id) for _ in range(2)]
        refused = open_stream(api, job_id)
        bobs = open_stream(other, bob_job)
        assert [stream.status_code for stream in streams] == [200, 200]
        assert refused.status_code == 429
        assert "API_MAX_STREAMS_PER_USER" in json.loads(refused.content)["detail"]
        assert int(refused["Retry-After"]) >= 1
        assert bobs.status_code == 200  # Bob's own streams
        streams[0].close()  # the client went away: the server closes the response
        again = open_stream(api, job_id)
        assert again.status_code == 200
    for response in [*streams, bobs, again]:
        response.close()
    assert not RequestSeat.objects.exists()


def test_streams_another_process_holds_count_and_lapse_if_it_died(
    ada: User, api: APIClient
) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    start = timezone.now()
    with capped(API_MAX_STREAMS_PER_USER=1, CLOCK="local"), time_machine.travel(start):
        assert take_seat(f"stream:auth.user:{ada.pk}", 1, LIFETIME) is not None  # elsewhere
        assert open_stream(api, job_id).status_code == 429
    later = timedelta(seconds=LIFETIME) + MARGIN + timedelta(seconds=1)
    with capped(API_MAX_STREAMS_PER_USER=1, CLOCK="local"), time_machine.travel(start + later):
        response = open_stream(api, job_id)
        assert response.status_code == 200
        response.close()


def test_a_key_has_at_most_so_many_claims_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bell, "_ensure_thread", lambda: None)  # no work comes anyway
    _row, key = create_key("gpu box", ["gpu"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    waited: list[int] = []

    def wait_for_work() -> None:
        try:
            body = {"worker": "w1", "wait": 1.5}
            waited.append(client.post(f"{API}workers/claim/", body, format="json").status_code)
        finally:
            connection.close()

    with capped(API_MAX_WAITING_CLAIMS_PER_KEY=1, QUEUES=GPU):
        waiting = threading.Thread(target=wait_for_work)
        waiting.start()
        deadline = time.monotonic() + 5
        while not RequestSeat.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = client.post(f"{API}workers/claim/", {"worker": "w2", "wait": 1}, format="json")
        at_once = client.post(f"{API}workers/claim/", {"worker": "w3"}, format="json")
        waiting.join(10)
        after = client.post(f"{API}workers/claim/", {"worker": "w2", "wait": 0.1}, format="json")

    assert refused.status_code == 429
    assert "API_MAX_WAITING_CLAIMS_PER_KEY" in refused.json()["detail"]
    assert at_once.status_code == 200  # a claim that does not wait holds no seat
    assert waited == [200]
    assert after.status_code == 200
    assert not RequestSeat.objects.exists()


@pytest.mark.parametrize("name", ["API_MAX_STREAMS_PER_USER", "API_MAX_WAITING_CLAIMS_PER_KEY"])
def test_the_caps_are_checked_settings(name: str) -> None:
    from django.core.checks import run_checks

    with capped(**{name: 0}):
        assert "django_ratequeue.E201" in [message.id for message in run_checks()]

"""Event streams never starve the API (issue 36): under a real WSGI server a process gives
streams at most API_STREAM_SHARE of its API_WSGI_THREADS, a stream over any cap (per
process, per user, per client address) is a 429 at once, and the other requests are
served throughout; under an ASGI server waiting streams hold no database connection."""

from __future__ import annotations

import gc
import http.client
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_ratequeue.models import RequestSeat
from tests.api.conftest import API, enqueue
from tests.queue.test_reliability import postgres_client_ports
from tests.servers import Server, launch

GREET = {"function": "tests.api.jobs.greet", "args": ["Ada"]}

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("background_threads_stop"),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``server(kind, threads=4, **RATEQUEUE overrides)`` starts gunicorn or uvicorn."""
    started: list[Server] = []

    def start(kind: str, **options: Any) -> Server:
        started.append(launch(kind, tmp_path / f"{kind}-{len(started)}.log", **options))
        return started[-1]

    yield start
    for running in started:
        running.kill()


def token(name: str) -> str:
    user = User.objects.create_user(name, password="secret")
    return str(Token.objects.create(user=user).key)


def call(
    server: Server, method: str, path: str, key: str, body: Any = None, **headers: str
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Send a request and return its connection and response, once its headers came.

    A server that answers nothing within 20 s fails the test (the socket times out)."""
    sent = {"Authorization": f"Token {key}", "Accept": "application/json", **headers}
    if body is not None:
        sent["Content-Type"] = "application/json"
    conn = server.connection(timeout=20)
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=sent)
    return conn, conn.getresponse()


def open_stream(server: Server, key: str, job_id: str) -> tuple[Any, http.client.HTTPResponse]:
    path = f"{API}jobs/{job_id}/events/"
    return call(server, "GET", path, key, Accept="text/event-stream")


def test_streams_hold_at_most_their_share_of_a_wsgi_process(
    server: Callable[..., Server],
) -> None:
    key = token("ada")
    web = server("gunicorn", threads=4, API_WSGI_THREADS=4, API_MAX_STREAMS_PER_USER=10)
    conn, created = call(web, "POST", f"{API}jobs/", key, GREET)
    assert created.status == 201, created.read()
    job_id = json.loads(created.read())["id"]  # no cluster runs: it waits, its streams stay
    conn.close()
    streams = [open_stream(web, key, job_id) for _ in range(4)]
    assert [response.status for _, response in streams] == [200, 200, 429, 429]
    refused = json.loads(streams[2][1].read())
    assert "API_STREAM_SHARE" in refused["detail"]
    assert int(streams[2][1].headers["Retry-After"]) >= 1
    for _ in range(3):  # two threads hold streams; the other two serve the rest
        conn, response = call(web, "GET", f"{API}jobs/{job_id}/", key)
        assert response.status == 200
        conn.close()
    conn, response = call(web, "POST", f"{API}jobs/", key, GREET)
    assert response.status == 201
    for conn, _ in streams:
        conn.close()


@pytest.mark.postgres_only
def test_waiting_streams_hold_no_connection_under_asgi(server: Callable[..., Server]) -> None:
    key = token("ada")
    web = server("uvicorn", API_MAX_STREAMS_PER_USER=30)
    conn, created = call(web, "POST", f"{API}jobs/", key, GREET)
    job_id = json.loads(created.read())["id"]
    conn.close()
    streams = [open_stream(web, key, job_id) for _ in range(20)]  # over the share: no WSGI
    assert {response.status for _, response in streams} == {200}
    conn, response = call(web, "GET", f"{API}jobs/{job_id}/", key)
    assert response.status == 200
    conn.close()
    # The pool keeps two, the watcher reads on one and listens on one: none per stream.
    assert len(postgres_client_ports(web.process.pid)) <= 5
    for conn, _ in streams:
        conn.close()


def stream(client: APIClient, job_id: str) -> Any:
    return client.get(f"{API}jobs/{job_id}/events/", HTTP_ACCEPT="text/event-stream")


def test_a_closed_or_dropped_stream_gives_its_thread_back(
    api: APIClient, other: APIClient
) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    bob_job = enqueue(other, "tests.api.jobs.greet", args=["Bob"]).json()["id"]
    gc.collect()  # the streams other tests left unclosed count no more
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "API_WSGI_THREADS": 2}):
        first = stream(api, job_id)
        assert first.status_code == 200
        assert stream(other, bob_job).status_code == 429  # Bob's first: the process is full
        first.close()
        second = stream(other, bob_job)
        assert second.status_code == 200
        del second  # never closed: it counts no more once it is collected
        gc.collect()
        third = stream(api, job_id)
        assert third.status_code == 200
        third.close()


def test_anonymous_visitors_share_their_address_cap() -> None:
    visitors = [APIClient(), APIClient()]  # two sessions, one address (127.0.0.1)
    caps = {"API_ALLOW_ANONYMOUS": True, "API_MAX_STREAMS_PER_ADDRESS": 1}
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, **caps}):
        jobs = [enqueue(v, "tests.api.jobs.greet", args=["x"]).json()["id"] for v in visitors]
        first = stream(visitors[0], jobs[0])
        assert first.status_code == 200
        refused = stream(visitors[1], jobs[1])
        assert refused.status_code == 429
        assert "API_MAX_STREAMS_PER_ADDRESS" in json.loads(refused.content)["detail"]
        first.close()
        again = stream(visitors[1], jobs[1])
        assert again.status_code == 200
        again.close()
    assert not RequestSeat.objects.exists()

"""GET jobs/<id>/events/: Server-Sent Events of a job, resumable, ending at its final
status, read without holding a connection per waiting client (WSGI and ASGI alike).

The streams read the job through the watcher, on its own connection: the tests commit
what they set up (``transaction=True``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import AsyncClient, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from django_ratequeue.api import sse
from django_ratequeue.api.watch import CONNECTIONS
from django_ratequeue.engine.models import Status
from django_ratequeue.engine.wakeup import JOBS, signal
from django_ratequeue.models import Job, OutputChunk
from tests.api.conftest import API, enqueue, logged_in
from tests.cluster import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("background_threads_stop"),
]


def parse(stream: bytes) -> list[dict[str, str]]:
    """The stream's blocks: each a dict of its fields (a comment under ":")."""
    blocks = []
    for block in stream.decode().split("\n\n"):
        if not block:
            continue
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            fields[name or ":"] = value.removeprefix(" ")
        blocks.append(fields)
    return blocks


def events(stream: bytes) -> list[tuple[str, str, Any]]:
    """(event, id, data) of each event of the stream."""
    return [
        (block["event"], block["id"], json.loads(block["data"]))
        for block in parse(stream)
        if "event" in block
    ]


def read(client: APIClient, job_id: str, **headers: Any) -> Any:
    response = client.get(
        f"{API}jobs/{job_id}/events/", HTTP_ACCEPT="text/event-stream", **headers
    )
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    return b"".join(response.streaming_content)


def finished_job(client: APIClient) -> str:
    """A job of the client's user that answered "Hi" after streaming two chunks."""
    job_id: str = enqueue(client, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    OutputChunk.objects.bulk_create(
        [
            OutputChunk(job_id=job_id, index=1, text="H"),
            OutputChunk(job_id=job_id, index=2, text="i"),
        ]
    )
    Job.objects.filter(pk=job_id).update(
        status=Status.COMPLETE,
        attempts=1,
        progress={"done": 2, "total": 2},
        result="Hi",
        finished_at=timezone.now(),
    )
    return job_id


def test_the_stream_of_a_finished_job(api: APIClient) -> None:
    job_id = finished_job(api)

    stream = read(api, job_id)

    assert stream.startswith(b"retry: 1000\n\n")
    assert events(stream) == [
        ("output", "1", {"index": 1, "text": "H"}),
        ("output", "2", {"index": 2, "text": "i"}),
        ("progress", "2", {"done": 2, "total": 2}),
        ("status", "2", {"status": "complete", "attempts": 1}),
        ("result", "2:end", {"result": "Hi"}),
    ]


def test_a_stream_resumes_after_its_last_event_id(api: APIClient) -> None:
    job_id = finished_job(api)

    after_first = events(read(api, job_id, HTTP_LAST_EVENT_ID="1"))
    by_query = api.get(f"{API}jobs/{job_id}/events/?since=1")

    assert [name for name, _, _ in after_first] == ["output", "progress", "status", "result"]
    assert after_first[0] == ("output", "2", {"index": 2, "text": "i"})
    assert events(b"".join(by_query.streaming_content)) == after_first


def test_after_the_final_event_a_reconnection_is_told_to_stop(api: APIClient) -> None:
    job_id = finished_job(api)
    response = api.get(f"{API}jobs/{job_id}/events/", HTTP_LAST_EVENT_ID="2:end")
    assert response.status_code == 204


@pytest.mark.parametrize("last_event_id", ["abc", "-1", "99999999999", "1:end:end", "%s"])
def test_an_id_the_server_did_not_give_starts_from_the_beginning(
    api: APIClient, last_event_id: str
) -> None:
    job_id = finished_job(api)
    stream = read(api, job_id, HTTP_LAST_EVENT_ID=last_event_id)
    assert events(stream)[0] == ("output", "1", {"index": 1, "text": "H"})


def test_a_failed_job_ends_with_an_error_event(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    Job.objects.filter(pk=job_id).update(
        status=Status.FAILED, attempts=3, error="ValueError: no", finished_at=timezone.now()
    )

    assert events(read(api, job_id))[-2:] == [
        ("status", "0", {"status": "failed", "attempts": 3}),
        ("error", "0:end", {"status": "failed", "error": "ValueError: no"}),
    ]


def change_later(job_id: str, *steps: Callable[[], Any]) -> threading.Thread:
    """Apply ``steps`` to the job from another thread, one every tenth of a second, as a
    worker would while a client watches: each raises the ``JOBS`` signal as the loop and
    the progress writer do (on SQLite the watcher sees the commit)."""

    def run() -> None:
        try:
            for step in steps:
                time.sleep(0.1)
                with transaction.atomic():
                    step()
                    signal(JOBS)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_the_stream_follows_a_running_job_until_it_ends(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    job = Job.objects.filter(pk=job_id)

    def chunk(index: int, text: str) -> Callable[[], Any]:
        return lambda: OutputChunk.objects.create(job_id=job_id, index=index, text=text)

    worker = change_later(
        job_id,
        lambda: job.update(status=Status.RUNNING, attempts=1),
        chunk(1, "Hello, "),
        lambda: job.update(progress={"done": 1}),
        chunk(2, "Ada!"),
        lambda: job.update(status=Status.COMPLETE, result="Hello, Ada!"),
    )
    stream = read(api, job_id)
    worker.join()

    seen = events(stream)
    assert seen[0] == ("status", "0", {"status": "waiting", "attempts": 0})
    assert ("status", "0", {"status": "running", "attempts": 1}) in seen
    assert [data["text"] for name, _, data in seen if name == "output"] == ["Hello, ", "Ada!"]
    assert ("progress", "1", {"done": 1}) in seen
    assert seen[-1] == ("result", "2:end", {"result": "Hello, Ada!"})


def test_a_quiet_stream_sends_heartbeats_and_ends_for_the_client_to_reconnect(
    api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sse, "HEARTBEAT", 0.0)
    monkeypatch.setattr(sse, "LIFETIME", 0.5)
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]

    blocks = parse(read(api, job_id))

    assert {":": "keep-alive"} in blocks
    assert "result" not in {block.get("event") for block in blocks}


def test_an_async_server_streams_the_same_events(ada: User) -> None:
    client = logged_in(ada)
    job_id = finished_job(client)
    session = client.cookies["sessionid"].value

    async def stream() -> bytes:
        async_client = AsyncClient()
        async_client.cookies.load({"sessionid": session})
        response = await async_client.get(f"{API}jobs/{job_id}/events/")
        assert response.status_code == 200
        assert response.is_async
        return b"".join([part async for part in response.streaming_content])

    assert events(asyncio.run(stream())) == events(read(client, job_id))


@pytest.mark.postgres_only
def test_waiting_clients_hold_no_connection_each(ada: User) -> None:
    """Twenty clients watch a job that does not change: while they wait, the process holds
    the watcher's connections for them (one reads, one listens), not one each."""
    client = logged_in(ada)
    job_id = enqueue(client, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    streams: list[Iterator[bytes]] = []
    many = override_settings(RATEQUEUE={**settings.RATEQUEUE, "API_MAX_STREAMS_PER_USER": 20})
    many.enable()

    def watch() -> None:
        response = logged_in(ada).get(f"{API}jobs/{job_id}/events/")
        stream = iter(response.streaming_content)
        next(stream)  # the first block: the stream is open, its request's connection closed
        next(stream)  # the first look
        streams.append(stream)

    watchers = [threading.Thread(target=watch) for _ in range(20)]
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        watcher.join()
    assert len(streams) == 20

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        (others,) = cursor.fetchone()
    assert others <= CONNECTIONS
    Job.objects.filter(pk=job_id).update(status=Status.CANCELED, finished_at=timezone.now())
    for stream in streams:
        assert b"event: error" in b"".join(stream)
    many.disable()


def test_a_job_answered_by_a_real_cluster_streams_live(api: APIClient, cluster: Any) -> None:
    cluster(workers=1)
    prompt = " ".join(f"word{n}" for n in range(12))
    job_id = enqueue(api, "tests.api.jobs.answer", kwargs={"prompt": prompt, "pause": 0.05})
    job_id = job_id.json()["id"]

    seen = events(read(api, job_id))

    names = [name for name, _, _ in seen]
    assert names[0] == "status"
    assert names[-1] == "result"
    assert ("status", {"status": "running", "attempts": 1}) in [(n, d) for n, _, d in seen]
    text = "".join(data["text"] for name, _, data in seen if name == "output")
    assert text.strip() == prompt
    assert seen[-1][2] == {"result": prompt}
    progress = [data["done"] for name, _, data in seen if name == "progress"]
    assert progress == sorted(progress)
    assert progress[-1] == 12
    wait_for(lambda: Job.objects.get(pk=job_id).status == Status.COMPLETE)

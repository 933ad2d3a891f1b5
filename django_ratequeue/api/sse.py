"""A job's Server-Sent Events: its status, progress, output, and the final result or error.

The stream looks at the job now and then (:class:`JobWatch`) and sends what changed.
Every event carries an ``id``: the number of the last output chunk sent so far, so that a
client that reconnects with ``Last-Event-ID`` gets the output after it, and the current
status and progress again (latest values; sending them twice is harmless). The final
event's id ends in ``:end``; a client that comes back with that id gets 204 No Content,
which tells ``EventSource`` to stop reconnecting.

A waiting client holds no database connection: the stream gives back the one its
request used, and each look at the job runs in one of a few reader threads of the process
(:class:`Readers`), which keep a connection each while they have work. The same code
serves WSGI (a plain generator) and ASGI (an async generator, so that a waiting stream
holds no thread either). Looks come every POLL_FASTEST seconds while something changes,
less often while nothing does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from ..queue.models import FINAL_STATUSES, Job, OutputChunk, Status
from .serializers import job_error

T = TypeVar("T")
logger = logging.getLogger("django_ratequeue.api")

# Seconds between looks: this soon after a change, backing off to the slowest while
# nothing changes (sooner for a running job, whose output may come at any moment).
POLL_FASTEST = 0.05
POLL_SLOWEST_RUNNING = 0.25
POLL_SLOWEST = 1.0
# A comment line this often keeps proxies from closing a quiet stream.
HEARTBEAT = 15.0
# A stream ends after this long; the client reconnects and goes on from its last id.
LIFETIME = 300.0
# What EventSource waits before it reconnects, in milliseconds.
RECONNECT_MS = 1000
# Output chunks read per look at most (a client far behind catches up over a few).
CHUNKS_PER_LOOK = 200

# Last-Event-ID: the last chunk's number, ":end" after the final event.
EVENT_ID = re.compile(r"([0-9]{1,10})(:end)?")


@dataclass(frozen=True)
class Resume:
    """Where a client's stream goes on from."""

    cursor: int = 0
    ended: bool = False

    @classmethod
    def parse(cls, last_event_id: str | None, since: str | None) -> Resume:
        """From ``Last-Event-ID`` (what EventSource sends), else the ``since`` parameter
        (a chunk number, for a client that starts a new EventSource); anything else that
        either holds is ignored: the stream starts at the beginning."""
        for value in (last_event_id, since):
            match = EVENT_ID.fullmatch(value.strip()) if value else None
            if match:
                return cls(int(match[1]), bool(match[2]))
        return cls()


@dataclass(frozen=True)
class Look:
    """The job as one look found it, with the output chunks after the stream's cursor."""

    status: str
    attempts: int
    progress: Any
    result: Any
    error: str | None
    chunks: list[tuple[int, str]]


def look(job_id: str, owner: str, cursor: int) -> Look | None:
    """The job as its owner may see it (``None``: there is none), then its chunks. In that
    order: the output of an attempt is written before its outcome, so a final status seen
    first means every chunk is there to read."""
    job = Job.objects.filter(pk=job_id, owner=owner).only(
        "status", "attempts", "progress", "result", "error"
    )
    found = job.first()
    if found is None:
        return None
    chunks = OutputChunk.objects.filter(job_id=job_id, index__gt=cursor).order_by("index")
    return Look(
        status=found.status,
        attempts=found.attempts,
        progress=found.progress,
        result=found.result if found.status == Status.COMPLETE else None,
        error=job_error(found),
        chunks=list(chunks.values_list("index", "text")[:CHUNKS_PER_LOOK]),
    )


_UNSEEN = object()


@dataclass
class JobWatch:
    """One client's view of one job: what it was sent, and what to send next."""

    job_id: str
    owner: str
    cursor: int
    status: str | None = None
    progress: Any = _UNSEEN
    done: bool = False
    pause: float = POLL_FASTEST
    started: float = field(default_factory=time.monotonic)
    last_sent: float = field(default_factory=time.monotonic)

    def look(self) -> Look | None:
        return look(self.job_id, self.owner, self.cursor)

    def events(self, seen: Look | None) -> str:
        """The events ``seen`` calls for, as the text of the stream (maybe empty); sets
        ``done`` once the final event is in it, or the job is gone."""
        if seen is None:
            self.done = True
            return ""
        final = seen.status in FINAL_STATUSES and len(seen.chunks) < CHUNKS_PER_LOOK
        parts = []
        if seen.status != self.status and seen.status not in FINAL_STATUSES:
            parts.append(self.event("status", {"status": seen.status, "attempts": seen.attempts}))
            self.status = seen.status
        for index, text in seen.chunks:
            self.cursor = index
            parts.append(self.event("output", {"index": index, "text": text}))
        if seen.progress is not None and seen.progress != self.progress:
            parts.append(self.event("progress", seen.progress))
            self.progress = seen.progress
        if final:
            if seen.status != self.status:
                parts.append(
                    self.event("status", {"status": seen.status, "attempts": seen.attempts})
                )
                self.status = seen.status
            if seen.status == Status.COMPLETE:
                parts.append(self.event("result", {"result": seen.result}, final=True))
            else:
                parts.append(
                    self.event("error", {"status": seen.status, "error": seen.error}, final=True)
                )
            self.done = True
        if parts:
            self.last_sent = time.monotonic()
        running = seen.status == Status.RUNNING
        slowest = POLL_SLOWEST_RUNNING if running else POLL_SLOWEST
        self.pause = POLL_FASTEST if parts else min(self.pause * 1.5, slowest)
        return "".join(parts)

    def event(self, name: str, data: Any, *, final: bool = False) -> str:
        ending = ":end" if final else ""
        payload = json.dumps(data, separators=(",", ":"))
        return f"event: {name}\nid: {self.cursor}{ending}\ndata: {payload}\n\n"

    def heartbeat(self) -> str:
        """A comment line when the stream was quiet for HEARTBEAT seconds."""
        if time.monotonic() - self.last_sent < HEARTBEAT:
            return ""
        self.last_sent = time.monotonic()
        return ": keep-alive\n\n"

    @property
    def over(self) -> bool:
        return self.done or time.monotonic() - self.started >= LIFETIME


def stream(watch: JobWatch) -> Iterator[bytes]:
    """The events of ``watch``'s job, for a WSGI server (one thread per client)."""
    release_connections()
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    while not watch.over:
        try:
            seen = readers.run(watch.look)
        except DatabaseError:
            logger.warning("A job's event stream lost the database", exc_info=True)
            return  # the client reconnects, and goes on from its last event
        text = watch.events(seen) or watch.heartbeat()
        if text:
            yield text.encode()
        if not watch.done:
            time.sleep(watch.pause)


async def astream(watch: JobWatch) -> AsyncIterator[bytes]:
    """The events of ``watch``'s job, for an ASGI server: a waiting client holds neither
    a connection nor a thread. A client that goes away cancels it."""
    await sync_to_async(release_connections)()
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    while not watch.over:
        try:
            seen = await asyncio.wrap_future(readers.submit(watch.look))
        except DatabaseError:
            logger.warning("A job's event stream lost the database", exc_info=True)
            return
        text = watch.events(seen) or watch.heartbeat()
        if text:
            yield text.encode()
        if not watch.done:
            await asyncio.sleep(watch.pause)


def release_connections() -> None:
    """Close this thread's database connections (those the request used to find the job)
    unless a transaction holds them: the stream reads through :data:`readers`."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


class Readers:
    """At most ``size`` threads that run the streams' looks, each on its own connection:
    however many clients wait, the process holds at most ``size`` connections for them.
    A thread with nothing to do for ``idle`` seconds closes its connections and ends."""

    def __init__(self, size: int = 4, idle: float = 1.0) -> None:
        self.size = size
        self.idle = idle
        self.tasks: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        self.waiting = 0

    def submit(self, task: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self.tasks.put((task, future))
        with self.lock:
            if self.threads < self.size and self.tasks.qsize() > self.waiting:
                self.threads += 1
                threading.Thread(target=self.work, name="ratequeue-events", daemon=True).start()
        return future

    def run(self, task: Callable[[], T]) -> T:
        return self.submit(task).result()

    def work(self) -> None:
        try:
            while (taken := self.next_task()) is not None:
                task, future = taken
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(task())
                    except BaseException as error:
                        # A lost connection: the next look opens a new one.
                        connections.close_all()
                        future.set_exception(error)
        finally:
            connections.close_all()

    def next_task(self) -> tuple[Callable[[], Any], Future[Any]] | None:
        with self.lock:
            self.waiting += 1
        while True:
            try:
                taken = self.tasks.get(timeout=self.idle)
            except queue.Empty:
                with self.lock:
                    if self.tasks.empty():
                        self.waiting -= 1
                        self.threads -= 1
                        return None
                continue
            with self.lock:
                self.waiting -= 1
            return taken


readers = Readers()

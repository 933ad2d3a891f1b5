"""A job's Server-Sent Events: its status, progress, output, and the final result or error.

The stream follows its job through the process's watcher (:mod:`.watch`) and sends what
each :class:`.watch.Look` shows that it has not sent yet, as a plain generator for WSGI
or an async one for ASGI. docs/http-api.md (the events endpoint) tells the events, their
ids, how a client resumes, and what a waiting stream costs.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import StreamingHttpResponse
from rest_framework.request import Request

from django_ratequeue.api.serializers import eta_data
from django_ratequeue.api.streamcaps import LIFETIME, StreamHold
from django_ratequeue.api.watch import Look, watcher
from django_ratequeue.jobs import Status
from django_ratequeue.models import FINAL_STATUSES

# A comment line this often keeps proxies from closing a quiet stream.
HEARTBEAT = 15.0
# What EventSource waits before it reconnects, in milliseconds.
RECONNECT_MS = 1000


def event_response(
    request: Request, hold: StreamHold, events: Iterator[bytes], aevents: AsyncIterator[bytes]
) -> StreamingHttpResponse:
    """Answer with ``events`` (``aevents`` under ASGI), releasing ``hold`` when they end."""
    held: Any
    if isinstance(request._request, ASGIRequest):
        held = AsyncSeatHeld(aevents, hold)
    else:
        held = SeatHeld(events, hold)
    response = StreamingHttpResponse(held, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


# Last-Event-ID: the last chunk's number, ":end" after the final event.
EVENT_ID = re.compile(r"([0-9]{1,10})(:end)?")


@dataclass(frozen=True)
class Resume:
    """Where a client's stream goes on from."""

    cursor: int = 0
    ended: bool = False

    @classmethod
    def parse(cls, last_event_id: str | None, since: str | None) -> Resume:
        """Read where the stream goes on from: ``Last-Event-ID``, else the ``since`` parameter.

        ``Last-Event-ID`` is what EventSource sends; ``since`` a chunk number, for a
        client that starts a new EventSource. Anything else that either holds is
        ignored: the stream starts at the beginning."""
        for value in (last_event_id, since):
            match = EVENT_ID.fullmatch(value.strip()) if value else None
            if match:
                return cls(int(match[1]), bool(match[2]))
        return cls()


_UNSEEN = object()
# What a stream sends first: how long its client waits before it reconnects.
OPENING = f"retry: {RECONNECT_MS}\n\n".encode()


class Quiet:
    """Stand for the look that did not come while a stream waited (:meth:`JobWatch.patience`)."""


QUIET = Quiet()


@dataclass
class JobWatch:
    """One client's view of one job: what it was sent, and what to send next."""

    job_id: str
    cursor: int
    status: str | None = None
    progress: Any = _UNSEEN
    done: bool = False
    started: float = field(default_factory=time.monotonic)
    last_sent: float = field(default_factory=time.monotonic)

    def events(self, seen: Look | None) -> str:
        """Return the events ``seen`` calls for, as the text of the stream (maybe empty).

        Set ``done`` once the final event is in it, or the job is gone."""
        if seen is None:
            self.done = True
            return ""
        final = seen.status in FINAL_STATUSES and not seen.more
        parts = []
        if seen.status != self.status and seen.status not in FINAL_STATUSES:
            parts.append(self.event("status", {"status": seen.status, "attempts": seen.attempts}))
            self.status = seen.status
        for index, text in seen.chunks:
            self.cursor = index
            parts.append(self.event("output", {"index": index, "text": text}))
        if seen.eta is not None and not final:
            parts.append(self.event("eta", eta_data(seen.eta)))
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
        return "".join(parts)

    def frame(self, seen: Look | Quiet | None) -> bytes:
        """Return what the stream sends after waiting for ``seen``.

        That is its events, else a heartbeat when one is due, else nothing."""
        text = "" if isinstance(seen, Quiet) else self.events(seen)
        return (text or self.heartbeat()).encode()

    def event(self, name: str, data: Any, *, final: bool = False) -> str:
        ending = ":end" if final else ""
        payload = json.dumps(data, separators=(",", ":"))
        return f"event: {name}\nid: {self.cursor}{ending}\ndata: {payload}\n\n"

    def heartbeat(self) -> str:
        """Return a comment line when the stream was quiet for HEARTBEAT seconds."""
        if time.monotonic() - self.last_sent < HEARTBEAT:
            return ""
        self.last_sent = time.monotonic()
        return ": keep-alive\n\n"

    @property
    def over(self) -> bool:
        return self.done or time.monotonic() - self.started >= LIFETIME

    def patience(self) -> float:
        """Return how long to wait for the watcher before a heartbeat, or the stream's end."""
        now = time.monotonic()
        return max(0.0, min(self.last_sent + HEARTBEAT, self.started + LIFETIME) - now)


def stream(watch: JobWatch) -> Iterator[bytes]:
    """Return the events of ``watch``'s job, for a WSGI server (one thread per client)."""
    release_connections()
    looks: queue.SimpleQueue[Look | None] = queue.SimpleQueue()
    subscription = watcher.subscribe(watch.job_id, watch.cursor, looks.put)
    try:
        yield OPENING
        while not watch.over:
            try:
                seen: Look | Quiet | None = looks.get(timeout=watch.patience())
            except queue.Empty:
                seen = QUIET
            if frame := watch.frame(seen):
                yield frame
    finally:
        watcher.unsubscribe(subscription)


async def astream(watch: JobWatch) -> AsyncIterator[bytes]:
    """Return the events of ``watch``'s job, for an ASGI server.

    A waiting client holds neither a connection nor a thread. A client that goes away
    cancels it."""
    await sync_to_async(release_connections)()
    loop = asyncio.get_running_loop()
    looks: asyncio.Queue[Look | None] = asyncio.Queue()

    def deliver(look: Look | None) -> None:
        with suppress(RuntimeError):  # the event loop closed: nobody listens any more
            loop.call_soon_threadsafe(looks.put_nowait, look)

    subscription = watcher.subscribe(watch.job_id, watch.cursor, deliver)
    try:
        yield OPENING
        while not watch.over:
            try:
                seen: Look | Quiet | None = await asyncio.wait_for(looks.get(), watch.patience())
            except TimeoutError:
                seen = QUIET
            if frame := watch.frame(seen):
                yield frame
    finally:
        watcher.unsubscribe(subscription)


class SeatHeld:
    """Hold a stream's seats (:mod:`.streamcaps`) while it sends its events.

    They are held until the response is closed, whether or not it was ever read."""

    def __init__(self, events: Iterator[bytes], hold: StreamHold) -> None:
        self.events = events
        self.hold = hold

    def __iter__(self) -> Iterator[bytes]:
        return self.events

    def close(self) -> None:
        """Stop the stream, then release its seats (once)."""
        try:
            close = getattr(self.events, "close", None)
            if close is not None:
                close()
        finally:
            self.hold.release()


class AsyncSeatHeld:
    """:class:`SeatHeld` for an ASGI server's stream.

    The seats are released as the stream ends, also when its client went away (Django
    then cancels the stream and never closes the response)."""

    def __init__(self, events: AsyncIterator[bytes], hold: StreamHold) -> None:
        self.events = events
        self.hold = hold

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for frame in self.events:
                yield frame
        finally:
            await sync_to_async(self.release)()

    def release(self) -> None:
        """Release the seats, closing the connection that took it (the request's thread's)."""
        try:
            self.hold.release()
        finally:
            release_connections()

    def close(self) -> None:
        """Release the seats if the stream never ran (the server closes the stream itself)."""
        self.hold.release()


def release_connections() -> None:
    """Close this thread's database connections unless a transaction holds them.

    Those are the ones the request used to find the job: only the watcher reads, on its
    own."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()

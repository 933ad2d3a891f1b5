"""A batch's Server-Sent Events: its progress as its jobs end, and its outcome at the end.

Unlike a job's stream (:mod:`.sse`), a batch's reads on its own: one look at the batch's
counts every BATCH_LOOK seconds (an index read, whatever its size), its connection
closed in between. A reconnecting client gets the progress as it is now: ``progress``
events carry the whole state, so nothing needs resuming. docs/batches.md.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from django_ratequeue.api.ids import shown_outcome
from django_ratequeue.api.sse import HEARTBEAT, LIFETIME, OPENING, release_connections
from django_ratequeue.models import FINAL_STATUSES
from django_ratequeue.plugins.batches.grouping import status_counts
from django_ratequeue.plugins.batches.models import Batch

# Seconds between two looks at a followed batch.
BATCH_LOOK = 1.0
# The id of the final event: a client that sends it back gets a 204.
FINAL_ID = "end"


@dataclass
class BatchWatch:
    """One client's view of one batch: the progress it was sent, and whether it ended."""

    batch_id: str
    sent: dict[str, Any] | None = None
    done: bool = False
    started: float = field(default_factory=time.monotonic)
    last_sent: float = field(default_factory=time.monotonic)

    def look(self) -> bytes:
        """Read the batch and return the events it calls for (a heartbeat, or nothing)."""
        batch = Batch.objects.filter(pk=self.batch_id).only("finished_at", "outcome").first()
        parts = []
        if batch is None:
            self.done = True
        else:
            counts = status_counts(self.batch_id)
            progress = {
                "done": sum(counts[status] for status in FINAL_STATUSES),
                "total": sum(counts.values()),
                "counts": {str(status): n for status, n in counts.items()},
            }
            if progress != self.sent:
                parts.append(event("progress", progress))
                self.sent = progress
            if batch.finished_at is not None:
                parts.append(event("finished", shown_outcome(batch.outcome), FINAL_ID))
                self.done = True
        release_connections()
        if parts:
            self.last_sent = time.monotonic()
        elif time.monotonic() - self.last_sent >= HEARTBEAT:
            self.last_sent = time.monotonic()
            parts.append(": keep-alive\n\n")
        return "".join(parts).encode()

    @property
    def over(self) -> bool:
        return self.done or time.monotonic() - self.started >= LIFETIME


def event(name: str, data: Any, event_id: str = "") -> str:
    payload = json.dumps(data, separators=(",", ":"))
    ident = f"id: {event_id}\n" if event_id else ""
    return f"event: {name}\n{ident}data: {payload}\n\n"


def batch_stream(watch: BatchWatch) -> Iterator[bytes]:
    """Return the events of ``watch``'s batch, for a WSGI server (one thread per client)."""
    yield OPENING
    while True:
        if frame := watch.look():
            yield frame
        if watch.over:
            return
        time.sleep(BATCH_LOOK)


async def abatch_stream(watch: BatchWatch) -> AsyncIterator[bytes]:
    """Return the events of ``watch``'s batch, for an ASGI server."""
    yield OPENING
    look = sync_to_async(watch.look)
    while True:
        if frame := await look():
            yield frame
        if watch.over:
            return
        await asyncio.sleep(BATCH_LOOK)

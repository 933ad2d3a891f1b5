"""The caps on event streams: per process (WSGI), per user, per client address.

A stream takes its seats before it sends anything, and a stream over any cap is a 429
at once. Under WSGI each stream holds one of its process's request threads for as long
as it lasts, so a process gives streams at most ``API_STREAM_SHARE`` of its
``API_WSGI_THREADS`` (a count in memory: a thread is the process's own); the other
threads always serve the other requests. Under ASGI a waiting stream holds no thread,
and that cap does not apply. The per-user and per-address caps are seats shared by all
processes (:mod:`..queue.seats`). docs/operations.md ("Event streams and threads").
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field

from django.core.handlers.asgi import ASGIRequest
from rest_framework.exceptions import Throttled
from rest_framework.request import Request

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.contrib.drf import RateLimitThrottle
from django_ratequeue.decorators import address_identity
from django_ratequeue.seats import free_seat, take_seat

# A stream ends after this long; the client reconnects and goes on from its last id.
LIFETIME = 300.0
# What a refused client waits before it tries again, in seconds (Retry-After).
RETRY_AFTER = 1


class ProcessShare:
    """Count the streams this process serves on its request threads, up to its share.

    A stream counts while its hold lives: one whose response was dropped unclosed stops
    counting once it is collected, and never takes a thread from the share for good."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holds: weakref.WeakSet[StreamHold] = weakref.WeakSet()

    @staticmethod
    def limit() -> int:
        """Return the most streams one WSGI process serves at once (0: none)."""
        settings = ratequeue_settings()
        return math.floor(settings.API_WSGI_THREADS * settings.API_STREAM_SHARE)

    def take(self, hold: StreamHold) -> bool:
        """Count ``hold`` if the share allows one more stream; say whether it did."""
        limit = self.limit()
        with self.lock:
            if len(self.holds) >= limit:
                return False
            self.holds.add(hold)
            return True

    def give_back(self, hold: StreamHold) -> None:
        with self.lock:
            self.holds.discard(hold)


process_share = ProcessShare()


@dataclass(eq=False)
class StreamHold:
    """What one stream holds: its seats, and a thread of the process's share (WSGI)."""

    seats: list[int] = field(default_factory=list)
    thread: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def release(self) -> None:
        """Give back what the stream holds (once; later calls do nothing)."""
        with self.lock:
            seats, self.seats = self.seats, []
            thread, self.thread = self.thread, False
        try:
            for seat in seats:
                free_seat(seat)
        finally:
            if thread:
                process_share.give_back(self)


def refuse(over: str) -> Throttled:
    """Return the 429 of a stream ``over`` a cap, saying what to do."""
    return Throttled(wait=RETRY_AFTER, detail=f"{over}: close one, or follow the job by polling.")


def take_stream_seat(request: Request, owner: str) -> StreamHold:
    """Take what a stream of ``owner`` needs under every cap, or raise a 429 (Throttled).

    A thread of the process's share under WSGI, one of the owner's
    ``API_MAX_STREAMS_PER_USER`` seats, and for an anonymous visitor one of their
    address's ``API_MAX_STREAMS_PER_ADDRESS``. A refusal holds nothing."""
    settings = ratequeue_settings()
    hold = StreamHold()
    try:
        if not isinstance(request._request, ASGIRequest):
            if not process_share.take(hold):
                raise refuse(
                    f"This server process serves {ProcessShare.limit()} event streams already "
                    '(RATEQUEUE["API_STREAM_SHARE"] of RATEQUEUE["API_WSGI_THREADS"])'
                )
            hold.thread = True
        limit = settings.API_MAX_STREAMS_PER_USER
        if not take(hold, f"stream:{owner}", limit):
            raise refuse(
                f"You have {limit} event streams open already "
                '(RATEQUEUE["API_MAX_STREAMS_PER_USER"])'
            )
        if not (request.user and request.user.is_authenticated):
            address = address_identity(RateLimitThrottle().get_ident(request)) or ""
            limit = settings.API_MAX_STREAMS_PER_ADDRESS
            if not take(hold, f"stream-address:{address}", limit):
                raise refuse(
                    f"Your address has {limit} event streams open already "
                    '(RATEQUEUE["API_MAX_STREAMS_PER_ADDRESS"])'
                )
    except BaseException:
        hold.release()
        raise
    return hold


def take(hold: StreamHold, holder: str, limit: int) -> bool:
    """Add one of ``holder``'s ``limit`` seats to ``hold``; say whether there was one free."""
    seat = take_seat(holder, limit, LIFETIME)
    if seat is None:
        return False
    hold.seats.append(seat)
    return True

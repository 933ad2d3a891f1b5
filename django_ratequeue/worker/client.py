"""The remote worker's HTTP client: JSON requests to the server's ``workers/`` endpoints,
sent again with back-off and jitter while the server is away."""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import threading
import time
import urllib.parse
from typing import Any

logger = logging.getLogger("django_ratequeue.worker")

BACKOFF_FIRST, BACKOFF_MAX = 0.1, 10.0
# How often a report is sent while the server fails on it (a 500): the back-off between
# the tries adds up to 3.1 s at most, well within a lease.
REPORT_TRIES = 6
# The header of the first request after the server was away: for how long, in seconds
# (the server then renews the leases that lapsed meanwhile; docs/remote-workers.md).
AWAY_HEADER = "Ratequeue-Away"


class ServerAway(Exception):
    """No answer, or a 429, 502, 503 or 504 on the way: the request may be sent again."""


class Answered(Exception):
    """An answer the request cannot go on from: its status, its body, and where from."""

    def __init__(self, status: int, body: Any, url: str) -> None:
        super().__init__(f"{status} from {url}: {body}")
        self.status, self.body = status, body


class ServerFailed(Answered):
    """A 500 (or another 5xx the server gave): it failed on this request, perhaps on what
    it holds. Sent again a few times only (:data:`REPORT_TRIES`) for a report."""


class Refused(Answered):
    """A 4xx answer: sending it again would not help."""


def not_found(url: str) -> str:
    """Say what a 404 means: the URL the worker was given is not where the endpoints are."""
    return (
        f"nothing answers at {url}. --url must be where the project mounts "
        "django_ratequeue.urls, such as https://example.com/ratequeue/ (the worker adds "
        "workers/claim/ and the like to it)"
    )


class Client:
    """JSON over HTTP to the server's ``workers/`` endpoints, with the worker's key, on
    kept-alive connections (one per thread that talks at a time, reused after)."""

    def __init__(self, url: str, key: str, stopping: threading.Event) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url!r} is not an http:// or https:// URL.")
        self.secure = parts.scheme == "https"
        self.netloc = parts.netloc
        self.path = parts.path.rstrip("/") + "/workers/"
        self.url = f"{parts.scheme}://{parts.netloc}{self.path}"
        self.headers = {"Authorization": f"Api-Key {key}", "Content-Type": "application/json"}
        self.stopping = stopping
        self.idle: list[http.client.HTTPConnection] = []
        self.lock = threading.Lock()
        # Whether the server answered yet: until it does, the worker waits without alarm.
        self.answered = False
        # Since when (monotonic) the server has been away: the next request that gets
        # through says how long (AWAY_HEADER), so that it renews the leases that lapsed.
        self.away_since: float | None = None

    def connect(self) -> tuple[http.client.HTTPConnection, bool]:
        """Return an idle connection (True: reused) or a new one (False)."""
        with self.lock:
            if self.idle:
                return self.idle.pop(), True
        if self.secure:
            return http.client.HTTPSConnection(self.netloc), False
        return http.client.HTTPConnection(self.netloc), False

    def post(self, path: str, body: dict[str, Any], timeout: float = 30.0) -> Any:
        """Send one request; raise :class:`ServerAway`, :class:`ServerFailed` or
        :class:`Refused`.

        A kept-alive connection the server closed meanwhile is replaced
        at once (every request here may be sent twice)."""
        data = json.dumps(body, allow_nan=False).encode()
        while True:
            headers, away_since = dict(self.headers), self.away_since
            if away_since is not None:
                headers[AWAY_HEADER] = f"{time.monotonic() - away_since:.3f}"
            connection, reused = self.connect()
            try:
                response, payload = self.request(connection, path, data, headers, timeout)
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                if reused and not isinstance(error, TimeoutError):
                    continue
                self.went_away()
                raise ServerAway(str(error) or type(error).__name__) from None
            if response.status in (502, 503, 504):
                self.went_away()
            elif away_since is not None and self.away_since == away_since:
                self.away_since = None  # told: the server renewed what lapsed meanwhile
            self.answered = True
            if response.will_close:
                connection.close()
            else:
                with self.lock:
                    self.idle.append(connection)
            return self.answer(path, response.status, payload)

    def request(
        self,
        connection: http.client.HTTPConnection,
        path: str,
        data: bytes,
        headers: dict[str, str],
        timeout: float,
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """POST ``data`` to ``path`` on ``connection``; return the response and its body."""
        connection.timeout = timeout
        if connection.sock is None:
            connection.connect()
        sock: socket.socket = connection.sock
        # http.client sends the headers and the body apart: without this, Nagle's
        # algorithm holds the body back until the server's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        connection.request("POST", self.path + path, data, headers)
        response = connection.getresponse()
        return response, response.read()

    def went_away(self) -> None:
        """Note that the server is away: since now, unless since earlier.

        Also before it first answered: the worker may have started while the server was
        away, and other workers of its key hold leases that lapsed meanwhile."""
        if self.away_since is None:
            self.away_since = time.monotonic()

    def answer(self, path: str, status: int, payload: bytes) -> Any:
        """Return the JSON of an answer with ``status``, or raise what the status means."""
        url = self.url + path
        try:
            answer = json.loads(payload or b"null")
        except ValueError:
            answer = None
            if status < 400:
                raise ServerAway(f"{status} from {url}: not JSON") from None
        if status in (429, 502, 503, 504):
            raise ServerAway(f"{status}: {answer}")
        if status >= 500:
            raise ServerFailed(status, answer, url)
        if status == 404:
            raise Refused(status, not_found(self.url.removesuffix("workers/")), url)
        if status >= 400:
            raise Refused(status, answer, url)
        return answer

    def send(
        self, path: str, body: dict[str, Any], timeout: float = 30.0, tries: int | None = None
    ) -> Any:
        """Send a request with :meth:`post` until the server answers, backing off with jitter.

        It stops when the worker is told to stop and ``path`` is a claim; a 500 is sent
        again ``tries`` times at most (None: as often as the server is away). Until the
        server first answers, the worker waits for it quietly (it may be starting too)."""
        pause = BACKOFF_FIRST
        failures = 0
        waiting_said = False
        while True:
            try:
                return self.post(path, body, timeout)
            except ServerAway as away:
                if self.stopping.is_set() and path == "claim/":
                    raise
                if self.answered:
                    logger.warning("Server away (%s); trying again in up to %.1fs", away, pause)
                elif not waiting_said:
                    logger.info("Waiting for the server at %s (%s)", self.url, away)
                    waiting_said = True
            except ServerFailed as failed:
                failures += 1
                if tries is not None and failures >= tries:
                    raise
                logger.warning("%s; trying again in up to %.1fs", failed, pause)
            time.sleep(random.uniform(0, pause))
            pause = min(pause * 2, BACKOFF_MAX)

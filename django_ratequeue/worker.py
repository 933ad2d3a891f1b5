"""A remote worker: runs the jobs of remote queues on a machine without database access.

    RATEQUEUE_WORKER_KEY=KEY python -m django_ratequeue.worker \\
        --url https://example.com/ratequeue/ --handlers myworker.handlers \\
        [--concurrency 4] [--queues gpu ...]

(or ``--key-file PATH``; ``--key KEY`` works too, but shows the key in the process list).
It needs Python's standard library only (no Django): ``manage.py ratequeue_worker_app``
builds it, with ``pool.py`` and ``plain.py``, into one file that runs as ``python
ratequeue-worker.pyz`` with handler modules that import ``worker``.
It claims attempts over HTTP (docs/remote-workers.md), runs the handler registered for
each job's function name, and reports the outcome, several outcomes per request under load
(:class:`Worker`). While an attempt runs, a thread of its own sends its output and progress
(at most every ``REPORT_INTERVAL``) and its heartbeats, which extend its lease; a job's
``timeout`` is enforced here (the attempt fails timed out at once). When the server is
away every request is retried with exponential back-off and jitter, unchanged (reports
are idempotent), and an ended attempt's heartbeats go on until its report is answered
(its lease outlives the outage: it is not run again); a report the server fails on (a
500) is sent ``REPORT_TRIES`` times, then its attempt is reported failed, saying so. On
SIGTERM (or SIGINT) it claims nothing more, lets running attempts finish for ``--grace``
seconds, then hands the rest back so that other workers can claim them at once.

A handlers module registers functions by the job's name, as it was enqueued::

    from django_ratequeue.worker import handler, report_progress, stream_output

    @handler("myapp.jobs.transcribe")
    def transcribe(url):
        for line in run_model(url):
            stream_output(line)
        return {"done": True}

(or defines ``HANDLERS = {"myapp.jobs.transcribe": transcribe}``).
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import dataclasses
import functools
import http.client
import importlib
import inspect
import json
import logging
import os
import random
import secrets
import signal
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

if __package__:  # django_ratequeue.worker, in the installed package
    from django_ratequeue import plain
    from django_ratequeue.engine.pool import Call, Finished, Pool
else:  # worker.py in the zipapp (manage.py ratequeue_worker_app), pool.py and plain.py beside it
    import plain  # type: ignore[no-redef]
    from pool import Call, Finished, Pool  # type: ignore[no-redef]

try:  # spans that continue the enqueuing request's trace, when OpenTelemetry is installed
    from django_ratequeue.tracing import end_attempt, start_attempt
except ImportError:  # the zipapp, on a host without the package

    def start_attempt(
        traceparent: str, attributes: dict[str, Any], run_in: contextvars.Context
    ) -> Any:
        return None

    def end_attempt(span: Any, outcome: str, error: str = "") -> None:
        return None


try:  # the package's own class, so that handlers shared with local jobs raise one class
    from django_ratequeue.exceptions import NonRetryableError
except ImportError:  # a host without Django (the zipapp)

    class NonRetryableError(Exception):  # type: ignore[no-redef]
        """Raise in a handler to fail the job at once, with no further attempts."""


logger = logging.getLogger("django_ratequeue.worker")

REPORT_INTERVAL = 0.1
# A piece of output sent in one request is at most this many characters (the server's
# MAX_OUTPUT_CHUNK_LENGTH is 64 Ki by default).
MAX_PIECE = 16 * 1024
# A failure's error and traceback are sent in at most this many bytes each (the server's
# MAX_ERROR_BYTES is 64 KiB by default, and clips them again to its own).
MAX_ERROR_BYTES = 64 * 1024
CLAIM_WAIT = 20.0
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 10.0
# How often a report is sent while the server fails on it (a 500): the back-off between
# the tries adds up to 3.1 s at most, well within a lease.
REPORT_TRIES = 6
# How many leases an ended attempt's lease is kept at most while its report waits for the
# server (the server takes it as lost after as many leases of silence).
HOLD_LEASES = 10
# The header of the first request after the server was away: for how long, in seconds
# (the server then renews the leases that lapsed meanwhile; docs/remote-workers.md).
AWAY_HEADER = "Ratequeue-Away"
# Where the key is read from when --key and --key-file are not given.
KEY_VARIABLE = "RATEQUEUE_WORKER_KEY"

_handlers: dict[str, Callable[..., Any]] = {}


def handler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the handler of jobs named ``name``."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        _handlers[name] = func
        return func

    return register


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
                payload = response.read()
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


class RemoteAttempt:
    """One claimed attempt, as its handler and its reporter thread share it."""

    def __init__(self, data: dict[str, Any], client: Client) -> None:
        self.data = data
        self.id: int = data["id"]
        self.client = client
        self.lock = threading.Lock()
        self.texts: list[str] = []
        self.progress: Any = None
        self.progress_sent = True
        self.output_index: int = data["output_index"]
        self.lease_seconds = 30.0
        self.last_beat = time.monotonic()
        self.canceled = threading.Event()
        self.lost = threading.Event()
        self.done = threading.Event()
        # Set once the server answered the attempt's outcome (or it is given up).
        self.answered = threading.Event()
        # Whether the handler still runs past the job's timeout (its outcome reported).
        self.overrun = False

    def report(self, action: str, body: dict[str, Any] | None = None) -> Any:
        """Send a report on this attempt; None (and the attempt is lost) when the server
        says it is not ours any more (409) or refuses our key (401, 403)."""
        try:
            path = f"attempts/{self.id}/{action}/"
            return self.client.send(path, body or {}, tries=REPORT_TRIES)
        except Refused as refused:
            if refused.status in (401, 403, 409):
                if not self.answered.is_set():  # else: a heartbeat that crossed the report
                    logger.warning("Attempt %s is lost: %s", self.id, refused)
                self.lost.set()
                return None
            raise

    def flush(self) -> None:
        """Send the output and progress not sent yet, in order. A piece the server does
        not take (a 400: text no database can store, say) is logged and dropped, and the
        rest is sent: it never costs the attempt its outcome."""
        with self.lock:
            texts, self.texts = self.texts, []
            progress, due = self.progress, not self.progress_sent
            self.progress_sent = True
        text = "".join(texts)
        for start in range(0, len(text), MAX_PIECE):
            piece = {"index": self.output_index, "text": text[start : start + MAX_PIECE]}
            if self.lost.is_set():
                return
            if self.send_piece("output", piece):
                self.output_index += 1  # numbered on only from a piece taken in
        if due and not self.lost.is_set():
            self.send_piece("progress", {"progress": progress})

    def send_piece(self, action: str, body: dict[str, Any]) -> bool:
        """Send a piece of output or progress; return whether the server took it in."""
        try:
            return self.report(action, body) is not None
        except Answered as error:
            logger.warning(
                "Attempt %s: the server did not take its %s: %s", self.id, action, error
            )
            return False

    def beat(self) -> None:
        answer = self.report("heartbeat")
        self.last_beat = time.monotonic()
        if answer and answer.get("canceled"):
            self.canceled.set()

    def keep_reporting(self) -> None:
        """Send the attempt's output and progress, until it is done.

        The reporter thread's body; it also beats a heartbeat every third of the lease."""
        while not self.done.wait(REPORT_INTERVAL) and not self.lost.is_set():
            try:
                self.flush()
                if time.monotonic() - self.last_beat > self.lease_seconds / 3:
                    self.beat()
            except Answered:
                logger.exception("The server did not take a heartbeat of attempt %s", self.id)

    def keep_lease(self) -> None:
        """Beat the heartbeat while the attempt's report waits for its answer.

        The reporter thread's body once the handler ended: the lease outlives a server
        that is away or fails for a while, so that the attempt is not taken as lost (and
        run again) meanwhile; for ``HOLD_LEASES`` leases at most."""
        deadline = time.monotonic() + HOLD_LEASES * self.lease_seconds
        while not self.lost.is_set() and time.monotonic() < deadline:
            due = self.last_beat + self.lease_seconds / 3 - time.monotonic()
            if self.answered.wait(max(due, 0.0)):
                return
            try:
                self.beat()
            except Answered:
                logger.exception("The server did not take a heartbeat of attempt %s", self.id)


def _span_attributes(data: dict[str, Any]) -> dict[str, Any]:
    """Return the attributes of a claimed attempt's span, from the claim's answer."""
    return {
        "ratequeue.function": data.get("function", ""),
        "ratequeue.queue": data.get("queue", ""),
        "ratequeue.job_id": data.get("job_id", ""),
        "ratequeue.attempt_id": data.get("id", 0),
        "ratequeue.remote": True,
    }


_current: contextvars.ContextVar[RemoteAttempt | None] = contextvars.ContextVar(
    "ratequeue_remote_attempt", default=None
)


def _running(call: str) -> RemoteAttempt:
    attempt = _current.get()
    if attempt is None:
        raise RuntimeError(f"{call} reports on the job running it: call it from a handler.")
    return attempt


def stream_output(text: str) -> None:
    """Append ``text`` to the running job's output (sent within ``REPORT_INTERVAL``)."""
    if not isinstance(text, str):
        raise TypeError(f"stream_output() takes a str, not {plain.class_name(text, 'an object')}.")
    attempt = _running("stream_output()")
    with attempt.lock:
        attempt.texts.append(plain.text(text))


def report_progress(data: dict[str, Any]) -> None:
    """Record how far the running job is, as a JSON object (the latest one is sent)."""
    if not isinstance(data, dict):
        raise TypeError(
            f"report_progress() takes a dict, not {plain.class_name(data, 'an object')}."
        )
    text = plain.json_text("The job's progress", data)
    attempt = _running("report_progress()")
    with attempt.lock:
        attempt.progress, attempt.progress_sent = json.loads(text), False


def canceled() -> bool:
    """Whether the running job was canceled (its handler may stop early)."""
    return _running("canceled()").canceled.is_set()


class Worker:
    """Claims attempts while it has free slots, runs each in a thread of its own.

    Two threads talk to the server. The claimer takes attempts for the free slots,
    waiting in a long claim when there is nothing to take yet. The reporter sends the
    outcomes of ended attempts, all those that ended since its last request in one claim
    (``reports``) that also takes attempts for the slots they freed, without waiting: under
    load, one request ends attempts and takes the next ones. Slots a claim may fill are
    reserved until its answer is in. An attempt stays in ``running`` until its outcome is
    answered, and is never started again once ended, whatever a claim's answer holds."""

    FINISHED_KEPT = 1000

    def __init__(
        self,
        client: Client,
        handlers: dict[str, Callable[..., Any]],
        concurrency: int = 1,
        queues: list[str] | None = None,
        grace: float = 30.0,
    ) -> None:
        self.client = client
        self.handlers = handlers
        self.concurrency = concurrency
        self.queues = queues
        self.grace = grace
        self.name = secrets.token_hex(8)
        self.running: dict[int, RemoteAttempt] = {}
        self.finished: collections.deque[int] = collections.deque(maxlen=self.FINISHED_KEPT)
        self.busy = 0  # attempts whose handler runs
        self.reserved = 0  # slots a claim in flight may fill
        self.outbox: list[tuple[RemoteAttempt, dict[str, Any]]] = []
        self.slots = threading.Condition()
        self.stopping = client.stopping
        self.calls = Pool(concurrency, self.call_ended, name="worker-slot")
        self.calls_ending: dict[Hashable, threading.Event] = {}
        self.calls_ended: dict[Hashable, Finished] = {}

    def serve(self) -> None:
        """Claim and run until told to stop; then finish or release (see the module).
        Claims wait in a thread of their own, so that a stop never waits for one."""
        refused: list[Refused] = []
        claimer = threading.Thread(target=self.claim_loop, args=(refused,), daemon=True)
        claimer.start()
        threading.Thread(target=self.report_loop, daemon=True).start()
        while not self.stopping.wait(0.5) and claimer.is_alive():
            pass
        self.stopping.set()
        with self.slots:
            self.slots.notify_all()
        self.finish()
        if refused:
            raise refused[0]

    def free(self) -> int:
        """Slots neither running a handler nor reserved (under ``slots``)."""
        return max(self.concurrency - self.busy - self.reserved, 0)

    def claim_loop(self, refused: list[Refused]) -> None:
        """Claim for the free slots while no outcome waits to be reported (the reporter's
        claim takes them then)."""
        while True:
            with self.slots:
                while not self.stopping.is_set() and (self.outbox or not self.free()):
                    self.slots.wait(1.0)
                if self.stopping.is_set():
                    return
                free = self.free()
                self.reserved += free
                running = list(self.running)
            try:
                claimed = self.exchange(free, running, [], CLAIM_WAIT)
            except ServerAway:  # told to stop while the server was away
                claimed = []
            except Refused as error:
                refused.append(error)
                claimed = []
            self.start(claimed, free)
            if refused or self.stopping.is_set():
                return

    def report_loop(self) -> None:
        """Send the outcomes of ended attempts, claiming for the free slots meanwhile."""
        while True:
            with self.slots:
                while not self.outbox:
                    self.slots.wait(1.0)
                reports, self.outbox = self.outbox, []
                free = 0 if self.stopping.is_set() else self.free()
                self.reserved += free
                running = list(self.running)
            try:
                claimed = self.exchange(free, running, reports, 0.0)
            except (ServerAway, Answered):
                claimed = []
                for attempt, report in reports:  # one by one, until each is answered
                    self.report_alone(attempt, report)
            self.start(claimed, free)

    def report_alone(self, attempt: RemoteAttempt, report: dict[str, Any]) -> None:
        """Send one attempt's outcome in a request of its own. Should the server not take
        it in (it fails on it however often it is sent, or refuses it), report the attempt
        failed, saying why: it is not left to lapse, and the worker goes on."""
        body = dict(report)
        action = body.pop("action")
        try:
            answer = attempt.report(action, body)
            if answer and answer.get("detail"):
                logger.warning("Attempt %s failed on the server: %s", attempt.id, answer["detail"])
        except Answered as error:
            reason = f"The server did not take this attempt's {action} report in: {error}"
            logger.warning("Attempt %s: %s", attempt.id, reason)
            try:
                attempt.report("fail", {"error": reason, "retryable": True})
            except Answered:
                logger.exception("Could not report attempt %s; its lease will lapse", attempt.id)
        self.forget(attempt)

    def exchange(
        self,
        free: int,
        running: list[int],
        reports: list[tuple[RemoteAttempt, dict[str, Any]]],
        wait: float,
    ) -> list[dict[str, Any]]:
        """Claim once: report ``reports``, and take up to ``free`` attempts.

        The claim waits up to ``wait`` seconds for one."""
        body: dict[str, Any] = {
            "worker": self.name,
            "host": socket.gethostname()[:255],
            "functions": sorted(self.handlers),
            "max": free,
            "wait": wait,
            "running": running,
        }
        if self.queues:
            body["queues"] = self.queues
        if reports:
            body["reports"] = [{"id": attempt.id, **report} for attempt, report in reports]
        tries = REPORT_TRIES if reports else None  # a report the server fails on fails alone
        answer = self.client.send("claim/", body, timeout=wait + 30, tries=tries)
        by_id = {item["id"]: item for item in answer.get("reports", [])}
        for attempt, _report in reports:
            item = by_id.get(attempt.id, {"status": 0, "detail": "no answer"})
            if item["status"] != 200:
                logger.warning("Attempt %s: its outcome was refused: %s", attempt.id, item)
            elif item["detail"]:
                logger.warning("Attempt %s failed on the server: %s", attempt.id, item["detail"])
            self.forget(attempt)
        lease = float(answer.get("lease_seconds", 30.0))
        attempts: list[dict[str, Any]] = answer["attempts"]
        for data in attempts:
            data["lease_seconds"] = lease
        return attempts

    def forget(self, attempt: RemoteAttempt) -> None:
        """Forget an attempt whose outcome is answered: it is not ours any more."""
        attempt.answered.set()
        with self.slots:
            self.running.pop(attempt.id, None)
            self.finished.append(attempt.id)
            self.slots.notify_all()

    def start(self, claimed: list[dict[str, Any]], reserved: int) -> None:
        """Run what a claim took (that reserved ``reserved`` slots), each in a thread."""
        started, released = [], []
        with self.slots:
            self.reserved -= reserved
            for data in claimed:
                if data["id"] in self.running or data["id"] in self.finished:
                    continue  # ours already, or ended: a claim's answer gave it again
                attempt = RemoteAttempt(data, self.client)
                attempt.lease_seconds = data["lease_seconds"]
                if self.stopping.is_set():  # claimed as the stop came: others may run it
                    released.append(attempt)
                    continue
                self.running[attempt.id] = attempt
                self.busy += 1
                started.append(attempt)
            self.slots.notify_all()
        for attempt in released:
            self.release(attempt)
        for attempt in started:
            threading.Thread(
                target=self.run, args=(attempt,), name=f"attempt-{attempt.id}", daemon=True
            ).start()

    def run(self, attempt: RemoteAttempt) -> None:
        reporter = threading.Thread(target=attempt.keep_reporting, daemon=True)
        reporter.start()
        report: dict[str, Any] | None = None
        try:
            action, body = self.execute(attempt)
            attempt.done.set()
            reporter.join()
            attempt.flush()
            if not attempt.lost.is_set():
                report = {"action": action, **body}
        except Exception:
            logger.exception("Could not report attempt %s", attempt.id)
        finally:
            attempt.done.set()
            if report is not None:  # its lease is kept until the report is answered
                threading.Thread(target=attempt.keep_lease, daemon=True).start()
            with self.slots:
                if report is not None:
                    self.outbox.append((attempt, report))
                self.slots.notify_all()
            if report is None:
                self.forget(attempt)
            while attempt.overrun and self.calls.holds(attempt.id):
                time.sleep(0.1)  # its slot is free once the handler returns
            with self.slots:
                self.busy -= 1
                self.slots.notify_all()

    def execute(self, attempt: RemoteAttempt) -> tuple[str, dict[str, Any]]:
        """Run the attempt's handler in a slot (a plain function on a thread, an ``async
        def`` one on the worker's event loop); the report that ends it. Past the job's
        ``timeout`` the handler is interrupted and the attempt fails as timed out; one
        that does not stop keeps its slot until it returns (a thread cannot be stopped)."""
        data = attempt.data
        func = self.handlers.get(data["function"])
        if func is None:
            error = f"This worker has no handler for {data['function']!r}."
            return "fail", {"error": error, "retryable": False}
        context = contextvars.copy_context()
        context.run(_current.set, attempt)
        span = start_attempt(data.get("traceparent") or "", _span_attributes(data), context)
        call = Call(
            key=attempt.id,
            function=functools.partial(func, *data["args"], **data["kwargs"]),
            is_async=inspect.iscoroutinefunction(inspect.unwrap(func)),
            timeout=data.get("timeout"),
            context=context,
        )
        ended = threading.Event()
        with self.slots:
            self.calls_ending[attempt.id] = ended
        self.calls.start(call)
        ended.wait()
        with self.slots:
            finished = self.calls_ended.pop(attempt.id)
        kind, report = self.outcome(attempt, finished)
        succeeded = kind == "complete"
        end_attempt(span, "succeeded" if succeeded else "failed", report.get("error", ""))
        return kind, report

    def call_ended(self, finished: Finished) -> None:
        """Hand a call's end, made plain data in the slot that ran it, to its waiting thread.

        Its value is then the report that ends the attempt (:func:`settle`)."""
        finished = dataclasses.replace(finished, value=settle(finished), error=None)
        with self.slots:
            self.calls_ended[finished.key] = finished
            self.calls_ending.pop(finished.key).set()

    def outcome(self, attempt: RemoteAttempt, finished: Finished) -> tuple[str, dict[str, Any]]:
        """Return the report that ends an attempt whose handler ended as ``finished`` did."""
        if finished.stuck:
            attempt.overrun = True
        kind, report = finished.value
        if kind != "complete":
            logger.info("Attempt %s failed: %s", attempt.id, report["error"])
        if finished.timed_out:
            error_text = (
                f"The worker stopped the handler: the attempt overran its timeout of "
                f"{attempt.data.get('timeout'):g} s."
            )
            return "fail", {"error": error_text, "retryable": True, "timed_out": True}
        return kind, report

    def finish(self) -> None:
        """Give the running attempts ``grace`` seconds, then release the rest."""
        deadline = time.monotonic() + self.grace
        with self.slots:
            while self.running and (left := deadline - time.monotonic()) > 0:
                self.slots.wait(left)
            left_over = [a for a in self.running.values() if not a.done.is_set()]
        for attempt in left_over:
            self.release(attempt)

    def release(self, attempt: RemoteAttempt) -> None:
        attempt.lost.set()  # its thread reports nothing more
        try:
            self.client.post(f"attempts/{attempt.id}/release/", {}, timeout=10)
            logger.info("Released attempt %s", attempt.id)
        except (ServerAway, Answered) as error:
            logger.warning("Could not release attempt %s: %s", attempt.id, error)


def settle(finished: Finished) -> tuple[str, dict[str, Any]]:
    """Return the report of a call's end, as plain data; never raise.

    Called in the slot that ran the call: a result that cannot be made JSON fails its
    own attempt, and nothing a handler's value or exception raises gets out."""
    error = finished.error
    if error is None:
        try:
            text = plain.json_text("The job's return value", finished.value)
            return "complete", {"result": json.loads(text)}
        except ValueError as refused:
            error = refused
    final = plain.guarded(lambda: isinstance(error, NonRetryableError), lambda _: False)
    return "fail", {
        "error": plain.clip(plain.describe(error), MAX_ERROR_BYTES),
        "traceback": plain.clip(plain.traceback_text(error), MAX_ERROR_BYTES),
        "retryable": not final,
    }


def load_handlers(names: list[str]) -> dict[str, Callable[..., Any]]:
    """Import the handler modules; the handlers they registered or list in HANDLERS."""
    found: dict[str, Callable[..., Any]] = {}
    for name in names:
        module = importlib.import_module(name)
        found.update(getattr(module, "HANDLERS", {}))
    found.update(_handlers)
    return found


def read_key(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Return the worker key, from ``--key-file``, ``--key`` or :data:`KEY_VARIABLE`, in
    that order. The variable is taken out of the environment: the processes handlers
    start do not inherit it."""
    if args.key and args.key_file:
        parser.error("give --key or --key-file, not both")
    from_environment = os.environ.pop(KEY_VARIABLE, "")
    key = args.key or from_environment
    if args.key_file:
        try:
            key = Path(args.key_file).read_text()
        except OSError as error:
            parser.error(f"cannot read --key-file: {error}")
    if not key.strip():
        parser.error(
            f"no worker key: set {KEY_VARIABLE}, or give --key-file (or --key, which shows "
            "it to anyone who lists this machine's processes)"
        )
    return key.strip()


def main(argv: list[str] | None = None) -> int:
    # In the zipapp, the program is the archive's name.
    prog = "python -m django_ratequeue.worker" if __package__ else None
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--url", required=True, help="Where the ratequeue URLs are mounted.")
    parser.add_argument(
        "--key-file", help=f"A file holding the worker key (or set {KEY_VARIABLE})."
    )
    parser.add_argument("--key", help="The worker key (visible in the process list).")
    parser.add_argument("--handlers", required=True, nargs="+", help="Handler module(s).")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--queues", nargs="*", help="Only these of the key's queues.")
    parser.add_argument("--grace", type=float, default=30.0, help="Seconds, on SIGTERM.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    key = read_key(parser, args)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    handlers = load_handlers(args.handlers)
    if not handlers:
        parser.error(f"{', '.join(args.handlers)} registered no handler")
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        logger.info("Stopping: finishing running attempts (grace %ss)", args.grace)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = Worker(
        Client(args.url, key, stopping), handlers, args.concurrency, args.queues, args.grace
    )
    logger.info("Worker %s serving %s", worker.name, ", ".join(sorted(handlers)))
    try:
        worker.serve()
    except Refused as refused:
        logger.error("The server refused this worker: %s", refused)
        return 2
    return 0


if __name__ == "__main__":
    # Run as a program, this file is ``__main__``, while handler modules import it by its
    # name (``django_ratequeue.worker``; ``worker`` in the zipapp): run main from the
    # module of that name, where they register.
    name = __spec__.name if __spec__ is not None else Path(__file__).stem
    raise SystemExit(importlib.import_module(name).main())

"""A remote worker: runs the jobs of remote queues on a machine without database access.

    python -m django_ratequeue.worker --url https://example.com/ratequeue/ --key KEY \\
        --handlers myworker.handlers [--concurrency 4] [--queues gpu ...]

It needs Python's standard library only (no Django): it claims attempts over HTTP
(docs/remote-workers.md), runs the handler registered for each job's function name, and
reports the outcome. While an attempt runs, a reporter thread of its own sends its
output and progress (at most every ``REPORT_INTERVAL``) and its heartbeats, which extend
its lease. When the server is away every request is retried with exponential back-off
and jitter, unchanged (reports are idempotent). On SIGTERM (or SIGINT) it claims nothing
more, lets running attempts finish for ``--grace`` seconds, then hands the rest back so
that other workers can claim them at once.

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
import contextvars
import importlib
import json
import logging
import random
import secrets
import signal
import socket
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("django_ratequeue.worker")

REPORT_INTERVAL = 0.1
# A piece of output sent in one request is at most this many characters (the server's
# MAX_OUTPUT_CHUNK_LENGTH is 64 Ki by default).
MAX_PIECE = 16 * 1024
CLAIM_WAIT = 20.0
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 10.0

_handlers: dict[str, Callable[..., Any]] = {}


def handler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the handler of jobs named ``name``."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        _handlers[name] = func
        return func

    return register


class NonRetryableError(Exception):
    """Raised by a handler: the job fails at once, without further attempts."""


class ServerAway(Exception):
    """No answer, or a 5xx: the request may be sent again."""


class Refused(Exception):
    """A 4xx answer: sending it again would not help."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status, self.body = status, body


class Client:
    """JSON over HTTP to the server's ``workers/`` endpoints, with the worker's key."""

    def __init__(self, url: str, key: str, stopping: threading.Event) -> None:
        self.url = url.rstrip("/") + "/workers/"
        self.key = key
        self.stopping = stopping

    def post(self, path: str, body: dict[str, Any], timeout: float = 30.0) -> Any:
        """One request; raises :class:`ServerAway` or :class:`Refused`."""
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body, allow_nan=False).encode(),
            headers={"Authorization": f"Api-Key {self.key}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            try:
                detail = json.loads(error.read() or b"null")
            except ValueError:
                detail = None
            if error.code >= 500 or error.code == 429:
                raise ServerAway(f"{error.code}: {detail}") from None
            raise Refused(error.code, detail) from None
        except (OSError, ValueError) as error:  # refused, reset, timed out, cut short
            raise ServerAway(str(error)) from None

    def send(self, path: str, body: dict[str, Any], timeout: float = 30.0) -> Any:
        """:meth:`post` until the server answers (unless the worker is told to stop and
        ``path`` is not a report that ends an attempt), backing off with jitter."""
        pause = BACKOFF_FIRST
        while True:
            try:
                return self.post(path, body, timeout)
            except ServerAway as away:
                if self.stopping.is_set() and path == "claim/":
                    raise
                logger.warning("Server away (%s); trying again in up to %.1fs", away, pause)
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

    def report(self, action: str, body: dict[str, Any] | None = None) -> Any:
        """Send a report on this attempt; None (and the attempt is lost) when the server
        says it is not ours any more (409) or refuses our key (401, 403)."""
        try:
            return self.client.send(f"attempts/{self.id}/{action}/", body or {})
        except Refused as refused:
            if refused.status in (401, 403, 409):
                logger.warning("Attempt %s is lost: %s", self.id, refused)
                self.lost.set()
                return None
            raise

    def flush(self) -> None:
        """Send the output and progress not sent yet, in order."""
        with self.lock:
            texts, self.texts = self.texts, []
            progress, due = self.progress, not self.progress_sent
            self.progress_sent = True
        text = "".join(texts)
        for start in range(0, len(text), MAX_PIECE):
            if self.lost.is_set():
                return
            piece = text[start : start + MAX_PIECE]
            self.report("output", {"index": self.output_index, "text": piece})
            self.output_index += 1
        if due and not self.lost.is_set():
            self.report("progress", {"progress": progress})

    def beat(self) -> None:
        answer = self.report("heartbeat")
        self.last_beat = time.monotonic()
        if answer and answer.get("canceled"):
            self.canceled.set()

    def keep_reporting(self) -> None:
        """The reporter thread: output and progress, and a heartbeat every third of the
        lease, until the attempt is done."""
        while not self.done.wait(REPORT_INTERVAL) and not self.lost.is_set():
            try:
                self.flush()
                if time.monotonic() - self.last_beat > self.lease_seconds / 3:
                    self.beat()
            except Refused:
                logger.exception("The server refused a report of attempt %s", self.id)


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
        raise TypeError(f"stream_output() takes a str, not {type(text).__name__}.")
    attempt = _running("stream_output()")
    with attempt.lock:
        attempt.texts.append(text)


def report_progress(data: dict[str, Any]) -> None:
    """Record how far the running job is, as a JSON object (the latest one is sent)."""
    if not isinstance(data, dict):
        raise TypeError(f"report_progress() takes a dict, not {type(data).__name__}.")
    text = json.dumps(data, allow_nan=False)
    attempt = _running("report_progress()")
    with attempt.lock:
        attempt.progress, attempt.progress_sent = json.loads(text), False


def canceled() -> bool:
    """Whether the running job was canceled (its handler may stop early)."""
    return _running("canceled()").canceled.is_set()


class Worker:
    """Claims attempts while it has free slots, runs each in a thread of its own."""

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
        self.slots = threading.Condition()
        self.stopping = client.stopping

    def serve(self) -> None:
        """Claim and run until told to stop; then finish or release (see the module).
        Claims wait in a thread of their own, so that a stop never waits for one."""
        refused: list[Refused] = []
        claimer = threading.Thread(target=self.claim_loop, args=(refused,), daemon=True)
        claimer.start()
        while not self.stopping.wait(0.5) and claimer.is_alive():
            pass
        self.stopping.set()
        self.finish()
        if refused:
            raise refused[0]

    def claim_loop(self, refused: list[Refused]) -> None:
        while not self.stopping.is_set():
            with self.slots:
                while len(self.running) >= self.concurrency and not self.stopping.is_set():
                    self.slots.wait(1.0)
                free = self.concurrency - len(self.running)
                running = list(self.running)
            if self.stopping.is_set():
                return
            try:
                claimed = self.claim(free, running)
            except ServerAway:
                return  # told to stop while the server was away
            except Refused as error:
                refused.append(error)
                return
            for data in claimed:
                self.start(data)

    def claim(self, free: int, running: list[int]) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "worker": self.name,
            "host": socket.gethostname()[:255],
            "functions": sorted(self.handlers),
            "max": free,
            "wait": CLAIM_WAIT,
            "running": running,
        }
        if self.queues:
            body["queues"] = self.queues
        answer = self.client.send("claim/", body, timeout=CLAIM_WAIT + 30)
        lease = float(answer.get("lease_seconds", 30.0))
        attempts = answer["attempts"]
        for data in attempts:
            data["lease_seconds"] = lease
        return attempts

    def start(self, data: dict[str, Any]) -> None:
        attempt = RemoteAttempt(data, self.client)
        attempt.lease_seconds = data["lease_seconds"]
        with self.slots:
            stopping = self.stopping.is_set()
            if not stopping:
                self.running[attempt.id] = attempt
        if stopping:  # claimed as the stop came: someone else may run it now
            self.release(attempt)
            return
        threading.Thread(
            target=self.run, args=(attempt,), name=f"attempt-{attempt.id}", daemon=True
        ).start()

    def run(self, attempt: RemoteAttempt) -> None:
        reporter = threading.Thread(target=attempt.keep_reporting, daemon=True)
        reporter.start()
        try:
            outcome = self.execute(attempt)
            attempt.done.set()
            reporter.join()
            attempt.flush()
            if not attempt.lost.is_set():
                action, body = outcome
                attempt.report(action, body)
        except Exception:
            logger.exception("Could not report attempt %s", attempt.id)
        finally:
            attempt.done.set()
            with self.slots:
                self.running.pop(attempt.id, None)
                self.slots.notify_all()

    def execute(self, attempt: RemoteAttempt) -> tuple[str, dict[str, Any]]:
        """Run the attempt's handler; the report that ends it."""
        data = attempt.data
        func = self.handlers.get(data["function"])
        if func is None:
            error = f"This worker has no handler for {data['function']!r}."
            return "fail", {"error": error, "retryable": False}
        token = _current.set(attempt)
        try:
            result = func(*data["args"], **data["kwargs"])
            json.dumps(result, allow_nan=False)
        except Exception as exc:
            logger.info("Attempt %s failed: %r", attempt.id, exc)
            return "fail", {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
                "retryable": not isinstance(exc, NonRetryableError),
            }
        finally:
            _current.reset(token)
        return "complete", {"result": result}

    def finish(self) -> None:
        """Give the running attempts ``grace`` seconds, then release the rest."""
        deadline = time.monotonic() + self.grace
        with self.slots:
            while self.running and (left := deadline - time.monotonic()) > 0:
                self.slots.wait(left)
            left_over = list(self.running.values())
        for attempt in left_over:
            self.release(attempt)

    def release(self, attempt: RemoteAttempt) -> None:
        attempt.lost.set()  # its thread reports nothing more
        try:
            self.client.post(f"attempts/{attempt.id}/release/", {}, timeout=10)
            logger.info("Released attempt %s", attempt.id)
        except (ServerAway, Refused) as error:
            logger.warning("Could not release attempt %s: %s", attempt.id, error)


def load_handlers(names: list[str]) -> dict[str, Callable[..., Any]]:
    """Import the handler modules; the handlers they registered or list in HANDLERS."""
    found: dict[str, Callable[..., Any]] = {}
    for name in names:
        module = importlib.import_module(name)
        found.update(getattr(module, "HANDLERS", {}))
    found.update(_handlers)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m django_ratequeue.worker")
    parser.add_argument("--url", required=True, help="Where the ratequeue URLs are mounted.")
    parser.add_argument("--key", required=True, help="A worker key (ratequeue_worker_key).")
    parser.add_argument("--handlers", required=True, nargs="+", help="Handler module(s).")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--queues", nargs="*", help="Only these of the key's queues.")
    parser.add_argument("--grace", type=float, default=30.0, help="Seconds, on SIGTERM.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
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
        Client(args.url, args.key, stopping), handlers, args.concurrency, args.queues, args.grace
    )
    logger.info("Worker %s serving %s", worker.name, ", ".join(sorted(handlers)))
    try:
        worker.serve()
    except Refused as refused:
        logger.error("The server refused this worker: %s", refused)
        return 2
    return 0


if __name__ == "__main__":
    # Run as ``-m``, this file is ``__main__``: run the imported module's main, so that
    # handler modules (which import django_ratequeue.worker) register where it looks.
    from django_ratequeue.worker import main as run

    raise SystemExit(run())

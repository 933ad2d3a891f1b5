"""One claimed attempt on the remote worker: its output, progress and heartbeats, sent
by a reporter thread while its handler runs, and its lease kept until its report is
answered."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

# Siblings are imported relatively: the package is django_ratequeue.worker when installed
# and ``worker`` in the zipapp (manage.py ratequeue_worker_app).
from .client import REPORT_TRIES, Answered, Client, Refused

logger = logging.getLogger("django_ratequeue.worker")

REPORT_INTERVAL = 0.1
# A piece of output sent in one request is at most this many characters (the server's
# MAX_OUTPUT_CHUNK_LENGTH is 64 Ki by default).
MAX_PIECE = 16 * 1024
# How many leases an ended attempt's lease is kept at most while its report waits for the
# server (the server takes it as lost after as many leases of silence).
HOLD_LEASES = 10


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

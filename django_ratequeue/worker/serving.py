"""The remote worker's loop: claim attempts for the free slots, run each handler in a slot
of a pool, and report the outcomes, several per request under load."""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import functools
import inspect
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

if __package__ == "django_ratequeue.worker":  # in the installed package
    from django_ratequeue import plain
    from django_ratequeue.engine.pool import Call, Finished, Pool
else:  # in the zipapp (manage.py ratequeue_worker_app): pool.py and plain.py beside the package
    import plain  # type: ignore[no-redef]
    from pool import Call, Finished, Pool  # type: ignore[no-redef]

# Siblings are imported relatively: the package is django_ratequeue.worker when installed
# and ``worker`` in the zipapp (manage.py ratequeue_worker_app).
from .attempt import RemoteAttempt
from .client import REPORT_TRIES, Answered, Client, Refused, ServerAway
from .handlers import current_attempt

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

# A failure's error and traceback are sent in at most this many bytes each (the server's
# MAX_ERROR_BYTES is 64 KiB by default, and clips them again to its own).
MAX_ERROR_BYTES = 64 * 1024
CLAIM_WAIT = 20.0


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
        """Claim and run until told to stop; then finish or release (see the package).
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
        context.run(current_attempt.set, attempt)
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


def _span_attributes(data: dict[str, Any]) -> dict[str, Any]:
    """Return the attributes of a claimed attempt's span, from the claim's answer."""
    return {
        "ratequeue.function": data.get("function", ""),
        "ratequeue.queue": data.get("queue", ""),
        "ratequeue.job_id": data.get("job_id", ""),
        "ratequeue.attempt_id": data.get("id", 0),
        "ratequeue.remote": True,
    }

"""Progress and partial output of a running job: ``report_progress`` and ``stream_output``.

A call only records its value in memory (:class:`PendingOutput`); the process's writer
thread (:class:`Writer`) writes it at most once per ``PROGRESS_INTERVAL`` per job, and
:func:`write_rest` what is left as the attempt ends. docs/api.md ("Batched") tells why.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import Max, Sum
from django.db.models.functions import Length

from django_ratequeue import plain
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import check_json_text, check_text
from django_ratequeue.engine.models import Attempt, Job, OutputChunk, queue_db
from django_ratequeue.engine.reconnects import in_job
from django_ratequeue.engine.subtasks import current_attempt
from django_ratequeue.engine.wakeup import JOBS
from django_ratequeue.exceptions import NotInJob
from django_ratequeue.threads import IdleExitThread

logger = logging.getLogger("django_ratequeue.queue")

# A writer thread with nothing to write for this long stops (and closes its connection).
IDLE_EXIT = 1.0
# After a failed write (the database away), the next try waits this long.
RETRY_AFTER = 1.0


class _Unset:
    """No progress reported since the last write."""


UNSET = _Unset()


class PendingOutput:
    """What one running attempt reported and streamed that is not written yet."""

    def __init__(self, job_id: str) -> None:
        settings = ratequeue_settings()
        self.job_id = job_id
        self.interval = settings.PROGRESS_INTERVAL
        self.chunk_length = settings.MAX_OUTPUT_CHUNK_LENGTH
        self.max_length = settings.MAX_OUTPUT_LENGTH
        # The output of the job's earlier attempts: numbering goes on after it, and it
        # counts towards MAX_OUTPUT_LENGTH.
        earlier = in_job(
            lambda: OutputChunk.objects.filter(job_id=job_id).aggregate(
                index=Max("index"), length=Sum(Length("text"))
            )
        )
        self.next_index: int = (earlier["index"] or 0) + 1
        self.length: int = earlier["length"] or 0
        self.texts: list[str] = []
        self.progress: Any = UNSET
        # ``lock`` guards what is pending; ``writing`` keeps writes one at a time, in order.
        self.lock = threading.Lock()
        self.writing = threading.Lock()
        # When the last write ended (time.monotonic).
        self.written_at = -math.inf
        self.dropped = False
        # Set when the attempt ended: the writer thread no longer retries it.
        self.ended = False

    @property
    def due(self) -> float:
        return self.written_at + self.interval

    def add_text(self, text: str) -> None:
        if len(text) > self.chunk_length:
            raise ValueError(
                f"stream_output() got {len(text)} characters at once; the most is "
                f'RATEQUEUE["MAX_OUTPUT_CHUNK_LENGTH"] ({self.chunk_length}): stream it in '
                "smaller pieces."
            )
        with self.lock:
            if self.length + len(text) > self.max_length:
                raise ValueError(
                    f"The job's output would exceed {self.max_length} characters "
                    '(RATEQUEUE["MAX_OUTPUT_LENGTH"], all its attempts together): store big '
                    "output elsewhere (a file, a row) and return a reference to it."
                )
            self.length += len(text)
            self.texts.append(text)

    def set_progress(self, value: dict[str, Any]) -> None:
        with self.lock:
            self.progress = value

    def write(self) -> None:
        """Write what is pending (nothing if nothing is), in one transaction.

        On a database error what was taken is put back in front, for the next write, and
        it is raised; what the database refuses as such (:class:`IntegrityError`) is
        dropped."""
        with self.writing:
            with self.lock:
                texts, self.texts = self.texts, []
                progress, self.progress = self.progress, UNSET
            if not texts and progress is UNSET:
                return
            rows = joined(texts, self.chunk_length)
            try:
                store(self.job_id, progress, self.next_index, rows)
            except IntegrityError:
                # The job is gone (deleted, or never saved), or a newer attempt of it (this
                # one was taken for lost) numbered these chunks: there is nothing to retry.
                if not self.dropped:
                    logger.warning("Dropped output of job %r", self.job_id, exc_info=True)
                self.dropped = True
            except DatabaseError:
                with self.lock:
                    self.texts[:0] = texts
                    if self.progress is UNSET:
                        self.progress = progress
                raise
            else:
                self.next_index += len(rows)
            finally:
                self.written_at = time.monotonic()


def store(job_id: str, progress: Any, first: int, texts: list[str]) -> None:
    """Write the job's ``progress`` (unless UNSET) and its chunks ``texts`` in one transaction.

    The chunks are :class:`OutputChunk` rows numbered from ``first``, on from the job's
    earlier attempts. The transaction raises the ``JOBS`` signal with the job's id (its
    event streams' watchers read it at once). In plain SQL: a running job writes several
    times a second, and building the ORM's statements would cost more than running them;
    the signal is each statement's ``RETURNING``, not a statement of its own (PostgreSQL
    delivers one signal per transaction however often it is raised)."""
    connection = connections[queue_db()]
    quote = connection.ops.quote_name
    signal = connection.vendor == "postgresql"
    returning = " RETURNING pg_notify(%s, %s)" if signal else ""
    notify = [JOBS, job_id] if signal else []
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if progress is not UNSET:
            value = Job._meta.get_field("progress").get_db_prep_save(progress, connection)
            cursor.execute(
                f"UPDATE {quote(Job._meta.db_table)} SET {quote('progress')} = %s "
                f"WHERE {quote('id')} = %s{returning}",
                [value, job_id, *notify],
            )
        if texts:
            columns = ", ".join(quote(name) for name in ("job_id", "index", "text"))
            rows = ", ".join(["(%s, %s, %s)"] * len(texts))
            params = [v for n, text in enumerate(texts) for v in (job_id, first + n, text)]
            cursor.execute(
                f"INSERT INTO {quote(OutputChunk._meta.db_table)} ({columns}) "
                f"VALUES {rows}{returning}",
                [*params, *notify],
            )


def joined(texts: list[str], limit: int) -> list[str]:
    """Join ``texts``, in order, into as few strings of at most ``limit`` characters as fit.

    Each text is at most ``limit`` long."""
    rows: list[str] = []
    current: list[str] = []
    size = 0
    for text in texts:
        if current and size + len(text) > limit:
            rows.append("".join(current))
            current, size = [], 0
        current.append(text)
        size += len(text)
    if current:
        rows.append("".join(current))
    return rows


class Writer:
    """Write each pending output on the process's writer thread, once its interval has passed.

    The interval counts since the output's last write; the thread stops after IDLE_EXIT
    seconds without work."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.waiting: set[PendingOutput] = set()
        self.daemon = IdleExitThread(
            self.run, name="ratequeue-progress", lock=self.condition, idle_exit=IDLE_EXIT
        )

    @property
    def thread(self) -> threading.Thread | None:
        """Return the writer's thread, or ``None`` when it is not running."""
        return self.daemon.thread

    def schedule(self, pending: PendingOutput) -> None:
        """Have ``pending`` written when it is due.

        The thread is woken only for output that was not waiting already: a job
        streaming tokens wakes it once per write."""
        with self.condition:
            if pending in self.waiting:
                return
            self.waiting.add(pending)
            self.daemon.start()
            self.condition.notify()

    def forget(self, pending: PendingOutput) -> None:
        with self.condition:
            self.waiting.discard(pending)
            self.condition.notify()  # it may be waiting for this one's turn

    def run(self) -> None:
        try:
            while (ready := self.next_ready()) is not None:
                for pending in ready:
                    self.write(pending)
        finally:
            connections[queue_db()].close()

    def next_ready(self) -> list[PendingOutput] | None:
        """Wait until some pending output is due and take it.

        Return ``None`` (and the thread ends) when there was none for IDLE_EXIT
        seconds."""
        with self.condition:
            while True:
                if not self.waiting:
                    if self.daemon.end_if_idle():
                        return None
                    self.condition.wait(self.daemon.idle_left())
                    continue
                self.daemon.keep_alive()
                now = time.monotonic()
                ready = [pending for pending in self.waiting if pending.due <= now]
                if ready:
                    self.waiting.difference_update(ready)
                    return ready
                self.condition.wait(min(pending.due for pending in self.waiting) - now)

    def write(self, pending: PendingOutput) -> None:
        try:
            pending.write()
        except Exception:
            logger.warning(
                "Could not write the progress or output of job %r; trying again",
                pending.job_id,
                exc_info=True,
            )
            connections[queue_db()].close()
            if not pending.ended:
                pending.written_at = time.monotonic() + RETRY_AFTER - pending.interval
                self.schedule(pending)


_writer = Writer()
# The pending output of each attempt running in this process, by id(attempt).
_pending: dict[int, PendingOutput] = {}
_pending_lock = threading.Lock()


def _pending_output(call: str) -> PendingOutput:
    attempt = current_attempt.get()
    if attempt is None:
        raise NotInJob(
            f"{call} reports on the job running it: call it from the job's function (or a "
            "thread that runs with a copy of its context, contextvars.copy_context())."
        )
    with _pending_lock:
        pending = _pending.get(id(attempt))
    if pending is None:
        made = outside_event_loop(PendingOutput, attempt.job_id)
        with _pending_lock:
            pending = _pending.setdefault(id(attempt), made)
    return pending


def outside_event_loop(make: type[PendingOutput], job_id: str) -> PendingOutput:
    """Return ``make(job_id)``, which reads the database, off any event loop.

    It runs in a thread of its own when this thread runs an event loop (an ``async def``
    job's), where the ORM refuses to run. The loop waits for that one short query, once
    per attempt."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return make(job_id)

    def closing() -> PendingOutput:
        try:
            return make(job_id)
        finally:
            connections.close_all()  # this thread's own, which ends here

    with ThreadPoolExecutor(1, thread_name_prefix="ratequeue-progress-start") as pool:
        return pool.submit(closing).result()


def report_progress(data: Mapping[str, Any]) -> None:
    """Record how far the running job is, as a JSON object (``{"done": 3, "total": 10}``).

    The latest value is kept on the job (``Handle.progress()``, the HTTP API)."""
    value = checked_progress(data)
    pending = _pending_output("report_progress()")
    pending.set_progress(value)
    _writer.schedule(pending)


def checked_progress(data: Any) -> Any:
    """Return ``data`` as the progress to store, a copy decoded from its JSON.

    What the job changes in ``data`` afterwards is not what it reported now. Raise a
    ValueError or TypeError saying what is wrong with it."""
    if not isinstance(data, Mapping):
        kind = plain.class_name(data, "an object")
        raise TypeError(f"report_progress() takes a dict (a JSON object), not {kind}.")
    subject = "The job's progress"
    text = check_json_text(subject, plain.json_text(subject, data))
    limit = ratequeue_settings().MAX_PROGRESS_BYTES
    if len(text) > limit:
        raise ValueError(
            f"The job's progress is {len(text)} bytes of JSON; the most is "
            f'RATEQUEUE["MAX_PROGRESS_BYTES"] ({limit}).'
        )
    return json.loads(text)


def stream_output(text: str) -> None:
    """Append ``text`` to the running job's partial output.

    It is read by ``Handle.output()`` and the HTTP API's ``output`` events: an LLM's
    tokens, a log, lines of a report."""
    text = checked_text(text)
    pending = _pending_output("stream_output()")
    if text:
        pending.add_text(text)
        _writer.schedule(pending)


def checked_text(text: Any) -> str:
    """Return ``text`` if it can be stored as output, else raise a ValueError or TypeError.

    The error says why."""
    if not isinstance(text, str):
        raise TypeError(f"stream_output() takes a str, not {plain.class_name(text, 'an object')}.")
    return check_text("The job's output", plain.text(text))


def write_rest(attempt: Attempt) -> None:
    """Write what ``attempt`` reported and streamed and is not written yet.

    Called as it ends, in its own thread, through a blip (:func:`.reconnects.in_job`). A
    database error that outlasts it is logged: the attempt's outcome stands."""
    with _pending_lock:
        pending = _pending.pop(id(attempt), None)
    if pending is None:
        return
    pending.ended = True
    _writer.forget(pending)
    try:
        in_job(pending.write)
    except DatabaseError:
        logger.exception("Lost the last progress or output of job %r", pending.job_id)

"""Handles: what a caller holds on to after enqueue.

A :class:`Handle` gives a job's status, result (also awaited), progress and output, its
attempts, and cancels it."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from asgiref.sync import sync_to_async
from django.db import models

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.estimate import Eta
from django_ratequeue.engine.heartbeat import queue_served
from django_ratequeue.engine.knowing import job_note
from django_ratequeue.engine.models import (
    FINAL_STATUSES,
    Attempt,
    CancelRequest,
    Job,
    OutputChunk,
    Status,
)
from django_ratequeue.engine.reconnects import JOB_PATIENCE, in_job, through_reconnects
from django_ratequeue.engine.subtasks import (
    aslots_released,
    check_wait,
    current_attempt,
    slots_released,
    workers_exhausted,
)
from django_ratequeue.engine.wakeup import LOOP, signal
from django_ratequeue.exceptions import (
    JobCanceled,
    JobDoesNotExist,
    JobFailed,
    RecursiveWaitDeadlock,
)

R_co = TypeVar("R_co", covariant=True)

# How often a job waiting on a subtask checks that some worker can still run it.
DEADLOCK_CHECK_EVERY = 0.25
# What waiting for a result reads of the job.
OUTCOME_FIELDS = ("status", "result", "error", "traceback", "exception_class_path")


# The plug-in whose estimate Handle.eta gives, the job's fields it reads, and how.
_estimator: tuple[str, tuple[str, ...], Callable[[Job], Eta]] | None = None


def set_estimator(plugin: str, fields: tuple[str, ...], estimate: Callable[[Job], Eta]) -> None:
    """Make :meth:`Handle.eta` return ``plugin``'s ``estimate(job)``, read with ``fields``."""
    global _estimator
    _estimator = (plugin, fields, estimate)


def owner_label(owner: Any) -> str:
    """Return the stored form of an owner.

    A model instance becomes ``app_label.model:pk``, any other value its ``str``. An
    identity that many people would share is refused."""
    if owner is None:
        return ""
    if getattr(owner, "is_anonymous", False):
        raise ValueError(
            "An anonymous user cannot own a job: every anonymous visitor would share it. "
            "Require a login, or pass an identity of the visitor's own, such as "
            'f"session:{request.session.session_key}" once the session is saved.'
        )
    if isinstance(owner, models.Model):
        if owner.pk is None:
            raise ValueError(
                f"An unsaved {type(owner).__name__} cannot own a job: save it first, so "
                "that it has a primary key."
            )
        return f"{owner._meta.label_lower}:{owner.pk}"
    return str(owner)


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt of a job, for timelines."""

    number: int
    dispatched_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str
    error: str
    traceback: str
    worker: str  # Attempt.worker_label
    exception_class_path: str = ""
    remote: bool = False  # claimed by a remote worker (with a worker key)


class Handle(Generic[R_co]):
    """Refer to one job by id, as seen by ``owner``: only that owner's job is visible through it.

    See :meth:`_job`. ``Handle[R]`` is the handle of a job whose function returns ``R``:
    what :meth:`result` returns."""

    def __init__(self, id: str, owner: Any = None) -> None:
        self.id = id
        self.owner = owner_label(owner)

    def __repr__(self) -> str:
        return f"<Handle {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _job(self, *fields: str) -> Job:
        """Return the job, as this handle may see it.

        A job enqueued with an ``owner`` is seen only through a handle built with that
        owner, one without through a handle without. Any other job looks exactly like a
        job that does not exist."""
        try:
            return Job.objects.only(*fields).get(pk=self.id, owner=self.owner)
        except JobDoesNotExist:
            raise JobDoesNotExist(missing_job(self.id)) from None

    def status(self) -> Status:
        return Status(self._job("status").status)

    def result(self, timeout: float | None = None) -> R_co:
        """Wait for the job's final status and return its return value.

        Raise :class:`JobFailed` (with the last error), :class:`JobCanceled`, or
        ``TimeoutError`` when ``timeout`` seconds pass first. Called from inside a
        running job, it gives that job's slots back while it waits (see
        :mod:`.subtasks`) and raises :class:`RecursiveWaitDeadlock` if the wait could
        never end. It blocks: in a thread that runs an event loop (an async view or
        job), it raises ``RuntimeError``; await :meth:`aresult` there.
        """
        check_timeout(timeout)
        refuse_in_event_loop()
        parent = current_attempt.get()
        if parent is None:
            return self._wait(timeout)
        child = in_job(lambda: self._job("status", "queue", "max_concurrency"))
        if child.status in FINAL_STATUSES:
            return self._wait(timeout)
        check_wait(parent, child)
        with slots_released(parent, child):
            return self._wait(timeout, parent=parent)

    async def aresult(self, timeout: float | None = None) -> R_co:
        """Wait as :meth:`result` does, from async code (an async view, an ``async def`` job).

        The event loop goes on while it waits, and each look at the job is a short query
        in a thread. From inside an ``async def`` job it is a subtask wait, as
        :meth:`result` is from a sync one."""
        check_timeout(timeout)
        parent = current_attempt.get()
        if parent is None:
            return await self._await(timeout)
        child = await sync_to_async(in_job)(
            lambda: self._job("status", "queue", "max_concurrency")
        )
        if child.status in FINAL_STATUSES:
            return await self._await(timeout)
        await sync_to_async(check_wait)(parent, child)
        async with aslots_released(parent, child):
            return await self._await(timeout, parent=parent)

    def _wait(self, timeout: float | None, parent: Attempt | None = None) -> Any:
        waiting = Waiting(self, timeout, parent)
        while not isinstance(found := waiting.look(), Job):
            time.sleep(found)
        return self._outcome(found)

    async def _await(self, timeout: float | None, parent: Attempt | None = None) -> Any:
        waiting = Waiting(self, timeout, parent)
        while not isinstance(found := await sync_to_async(waiting.look)(), Job):
            await asyncio.sleep(found)
        return self._outcome(found)

    def _outcome(self, job: Job) -> Any:
        """Return the value of a finished job, or the exception that says why there is none."""
        if job.status == Status.FAILED:
            raise JobFailed(self.id, job.error, job.traceback, job.exception_class_path)
        if job.status == Status.CANCELED:
            raise JobCanceled(self.id)
        return job.result

    def eta(self) -> Eta:
        """Return when the job will start: its place, the earliest start, an estimate.

        See :class:`~django_ratequeue.engine.estimate.Eta` and docs/eta.md."""
        if _estimator is None:
            raise RuntimeError(
                "Handle.eta() needs the eta plug-in, which declares itself as the app "
                "starts: add django_ratequeue to INSTALLED_APPS and call django.setup()."
            )
        _, fields, estimate = _estimator
        return estimate(self._job(*fields))

    async def aeta(self) -> Eta:
        """Return :meth:`eta` from async code (its reads in a thread)."""
        return await sync_to_async(self.eta)()

    def progress(self) -> dict[str, Any] | None:
        """Return the latest progress the job reported (``report_progress``), or ``None``."""
        progress: dict[str, Any] | None = self._job("progress").progress
        return progress

    def output(self, since: int = 0) -> list[str]:
        """Return the job's partial output (``stream_output``) as stored, in order.

        That is the chunks numbered above ``since`` (chunks are numbered from 1; pass
        how many you have)."""
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ValueError(f"since must be an integer, 0 or more, not {since!r}.")
        self._job("status")
        chunks = OutputChunk.objects.filter(job_id=self.id, index__gt=since).order_by("index")
        return list(chunks.values_list("text", flat=True))

    def cancel(self) -> None:
        """Ask the loop to cancel the job: at once unless running, else when its attempt ends."""
        self._job("status")
        CancelRequest.objects.create(job_id=self.id)
        signal(LOOP)

    def attempts(self) -> list[AttemptInfo]:
        self._job("status")
        rows = Attempt.objects.filter(job_id=self.id).select_related("worker_key")
        rows = rows.order_by("number")
        return [
            AttemptInfo(
                number=a.number,
                dispatched_at=a.dispatched_at,
                started_at=a.started_at,
                ended_at=a.ended_at,
                outcome=a.outcome,
                error=a.error,
                traceback=a.traceback,
                worker=a.worker_label,
                exception_class_path=a.exception_class_path,
                remote=a.worker_key_id is not None,
            )
            for a in rows
        ]


class Waiting:
    """Wait for a job's final status, look by look.

    It is what :meth:`Handle.result` and :meth:`Handle.aresult` share (they differ only
    in how they pause)."""

    def __init__(self, handle: Handle[Any], timeout: float | None, parent: Attempt | None):
        self.handle, self.timeout, self.parent = handle, timeout, parent
        now = time.monotonic()
        self.deadline = None if timeout is None else now + timeout
        self.next_deadlock_check = now + DEADLOCK_CHECK_EVERY
        self.pause = 0.005

    def look(self) -> Job | float:
        """Read the job: return it once it is final, else how long to pause before the next look.

        Raise ``TimeoutError`` past the deadline; :class:`RecursiveWaitDeadlock` when a
        parent's subtask could no longer run."""
        job = through_reconnects(
            lambda: self.handle._job(*OUTCOME_FIELDS, "queue"), patience=self.patience()
        )
        if job.status in FINAL_STATUSES:
            return job
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            raise TimeoutError(not_finished(job, self.timeout))
        parent = self.parent
        if parent is not None and now >= self.next_deadlock_check:
            self.next_deadlock_check = now + DEADLOCK_CHECK_EVERY
            if workers_exhausted(parent, self.handle.id):
                raise RecursiveWaitDeadlock(
                    f"Job {parent.job_id} waits on job {self.handle.id}, but every worker "
                    "is blocked waiting on a subtask: nobody is left to run it.",
                    queue=job.queue,
                    chain=[self.handle.id, parent.job_id],
                )
        pause = self.pause if self.deadline is None else min(self.pause, self.deadline - now)
        self.pause = min(self.pause * 1.5, 0.5)
        return max(pause, 0)

    def patience(self) -> float:
        """Return how long a look waits out a database blip: JOB_PATIENCE, up to the deadline."""
        if self.deadline is None:
            return JOB_PATIENCE
        return max(0.0, min(JOB_PATIENCE, self.deadline - time.monotonic()))


def refuse_in_event_loop() -> None:
    """Raise ``RuntimeError`` in a thread that runs an event loop.

    A blocking wait would stop that loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "Handle.result() blocks, and this thread runs an event loop (an async view or an "
        "async def job), which it would stop: use `await handle.aresult()` instead."
    )


def not_finished(job: Job, timeout: float | None) -> str:
    """Say that ``job`` did not finish within ``timeout`` seconds.

    And that nothing could run it when no worker that serves its queue, or none that knows
    its function, is alive."""
    message = f"Job {job.id} did not finish within {timeout} seconds (it is {job.status})"
    settings = ratequeue_settings()
    config = settings.QUEUES.get(job.queue)
    if not queue_served(job.queue) and config is not None and config.remote:
        message += (
            f": no remote worker that claims from queue {job.queue!r} has been seen "
            "lately. Start one: python -m django_ratequeue.worker --url URL --key KEY "
            '--handlers MODULE (see "Remote workers > Setting it up" in the documentation)'
        )
    elif not queue_served(job.queue):
        message += (
            ": no worker is alive (no django-q2 worker process has reported within "
            f"WORKER_DEAD_AFTER, {settings.WORKER_DEAD_AFTER:g} s). Start the "
            "cluster: python manage.py qcluster"
        )
    elif job.status == Status.RUNNING and (note := job_note(job.id, job.func, clock.now())):
        message += (
            f": {note}. It starts as soon as a worker that knows it runs (deploy the code "
            "that registers it to the workers), and fails after UNKNOWN_JOB_PATIENCE"
        )
    return message + "."


def get_handle(id: str, owner: Any = None) -> Handle[Any]:
    """Rebuild the handle of an existing job.

    Raise :class:`JobDoesNotExist` if there is none that a handle with this ``owner``
    may see (see :meth:`Handle._job`)."""
    handle: Handle[Any] = Handle(id, owner=owner)
    if not Job.objects.filter(pk=id, owner=handle.owner).exists():
        raise JobDoesNotExist(missing_job(id))
    return handle


def missing_job(id: str) -> str:
    return (
        f"There is no job with id {id!r}: finished jobs are pruned RETENTION seconds after "
        "they end."
    )


def cancel_all(queue: str | None = None) -> None:
    """Cancel every unfinished job, or those of one queue."""
    CancelRequest.objects.create(queue=queue or "")
    signal(LOOP)


def check_timeout(timeout: float | None) -> None:
    """Refuse a wait's ``timeout`` unless it is ``None`` (no limit) or finite seconds, 0 or more.

    ``nan`` would never expire, and a negative one is a mistake worth naming."""
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise ValueError(
            f"timeout must be None (wait as long as it takes) or a finite number of seconds, "
            f"0 or more, not {timeout!r}."
        )

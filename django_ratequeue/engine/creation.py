"""Create job rows: the one path by which every job is written.

``enqueue``, ``enqueue_many``, the HTTP API, a schedule's run and the loop's
``on_complete`` callbacks all call :func:`create_jobs`. It checks the calls as an enqueue
does (:mod:`.options` checked the options), writes the rows in one INSERT or statement,
wakes the loop, opens the enqueue span (:mod:`django_ratequeue.tracing`) and announces
``job_enqueued`` once the rows commit. docs/concepts.md ("Tables and who writes them")
tells why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, cast

from django.db import IntegrityError, transaction

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.admission import check_enqueue_rate, check_reservation_room
from django_ratequeue.engine.bounds import check_json
from django_ratequeue.engine.limits import store_queue_changes
from django_ratequeue.engine.models import Job, QueueSetting, queue_connection, queue_db
from django_ratequeue.engine.options import (
    PER_JOB_COLUMNS,
    JobOptions,
    JobStamp,
    JobTemplate,
)
from django_ratequeue.engine.registry import Registered, check_call, registered_job
from django_ratequeue.engine.wakeup import LOOP, signal
from django_ratequeue.exceptions import DuplicateJobId, RateQueueError, UnknownJob, describe
from django_ratequeue.signals import announce, listened
from django_ratequeue.tracing import enqueue_span

logger = logging.getLogger("django_ratequeue.queue")
JOB_ID_MAX_LENGTH = Job._meta.get_field("id").max_length or 200
ID_COLUMN = PER_JOB_COLUMNS.index("id")

# One call of a job: its positional and its keyword arguments.
Call = tuple[list[Any], dict[str, Any]]


class HasOptions(Protocol):
    """A job function's default options (what ``@job`` and ``.using()`` set)."""

    options: JobOptions


@dataclass(frozen=True)
class Owed:
    """Jobs the loop owes (``on_complete`` callbacks), not a producer's request.

    No admission refuses them (the enqueue rate limit, a rate gate's reservations), a
    taken id is skipped whoever owns it, they belong to no parent job or batch, and
    their enqueue span continues ``traceparent``, the trace of the job they report on."""

    traceparent: str = ""


class Created(NamedTuple):
    """What :func:`create_jobs` wrote: the template, each job's stamped call, the kept ids.

    ``stamped`` holds one tuple per call in ``PER_JOB_COLUMNS``' order; ``kept`` the ids
    of the existing jobs that answered a call instead of a new one."""

    template: JobTemplate
    stamped: list[tuple[Any, ...]]
    kept: set[str]

    def ids(self) -> list[str]:
        """Return the id of each call's job, in the calls' order."""
        return [call[ID_COLUMN] for call in self.stamped]


def job_target(func: Callable[..., Any] | str) -> tuple[Registered, JobOptions]:
    """Return the registered job that ``func`` names, and its default options.

    The options are a ``@job`` copy's own when ``func`` is one."""
    registered = registered_job(func.func if isinstance(func, Registered) else func)
    own = func if isinstance(func, Registered) else registered  # only @job registers jobs
    return registered, cast(HasOptions, own).options


def create_jobs(
    target: Registered | str,
    options: JobOptions,
    calls: Iterable[Call],
    *,
    items: bool = False,
    owed: Owed | None = None,
    now: datetime | None = None,
) -> Created:
    """Check and write one job per call of ``target`` with ``options``, all or none.

    With ``items`` the calls are the items of one bulk enqueue (ids ``x-0``, ``x-1``...
    for ``id="x"``, errors naming the item); else there is one call. Raise what the
    checks raise, before anything is written; ``DuplicateJobId`` for a taken id unless
    ``on_duplicate_id="ignore"`` found the owner's own job (or the jobs are ``owed``).
    ``target`` is a path only for an owed callback this process does not know."""
    template = options.template(target if isinstance(target, str) else target.path)
    follows = None if owed is None else owed.traceparent
    with enqueue_span(template.func, template.queue, follows):
        if items:
            created = _write_items(target, template, calls, owed, now or clock.now())
        else:
            (call,) = calls
            created = _write_one(target, template, call, owed, now or clock.now())
    announce_enqueued(template, [i for i in created.ids() if i not in created.kept])
    return created


def create_callback(
    func: str,
    outcome: dict[str, Any],
    now: datetime,
    *,
    owner: str,
    job_id: str = "",
    traceparent: str = "",
    of: str = "a job",
) -> bool:
    """Create the ``on_complete`` job ``func(outcome)`` that the loop owes; return whether.

    It runs with its own ``@job`` options (queue, retries, timeout...), owned by
    ``owner``; ``job_id`` gives its id, which is skipped when taken. A callback the checks
    refuse (too big an outcome, a function that takes no such argument...) is logged as
    an error, not written: the job it reports on has ended all the same."""
    try:
        target, defaults = _callback_target(func)
        extra = {"owner": owner, **({"id": job_id} if job_id else {})}
        owed = Owed(traceparent)
        create_jobs(target, defaults.merge(extra), [([outcome], {})], owed=owed, now=now)
    except (RateQueueError, ValueError, TypeError) as refused:
        logger.error(
            "The on_complete callback %s of %s was not created: %s",
            func,
            of,
            describe(refused),
        )
        return False
    return True


def _callback_target(func: str) -> tuple[Registered | str, JobOptions]:
    """Return the callback's registered job and options; its path and none if unknown.

    A callback this process does not know (a newer deploy's) is created all the same,
    on "default" with the default options, and waits for a worker that knows it
    (``UNKNOWN_JOB_PATIENCE``), as any job does: its path was checked at enqueue."""
    try:
        return job_target(func)
    except UnknownJob:
        return func, JobOptions()


def _check_call(target: Registered | str, args: Any, kwargs: Any, where: str = "") -> None:
    """Check that the call fits the function, when this process knows it."""
    if isinstance(target, Registered):
        check_call(target, args, kwargs, where)


def announce_enqueued(template: JobTemplate, job_ids: list[str]) -> None:
    """Announce ``job_enqueued`` for the jobs written, once their transaction commits."""
    if listened("job_enqueued"):
        records = [{"job_id": i, "func": template.func, "queue": template.queue} for i in job_ids]
        announce("job_enqueued", queue_db(), records)


def _stamp(
    template: JobTemplate, now: datetime, owed: Owed | None, job_id: str | None = None
) -> JobStamp:
    """Return the stamp of a job created ``now``: an owed one's lineage is the loop's."""
    stamp = template.stamp(now, job_id)
    if owed is None:
        return stamp
    traceparent = stamp.traceparent or owed.traceparent  # without OTel: the job's own
    return stamp._replace(parent_id="", batch_id="", traceparent=traceparent)


def _write_one(
    target: Registered | str, template: JobTemplate, call: Call, owed: Owed | None, now: datetime
) -> Created:
    """Check one call, then write its job in one INSERT (or as its holds decide)."""
    args, kwargs = call
    _check_call(target, args, kwargs)
    args_json = check_json("arguments", args)
    kwargs_json = check_json("keyword arguments", kwargs)
    template.check_size(args_json, kwargs_json)
    if owed is None:
        check_reservation_room(template.queue, template.cost, template.concurrency_key)
    settings = ratequeue_settings()
    stamp = _stamp(template, now, owed)
    rated = owed is None and settings.ENQUEUE_RATE_LIMIT is not None
    if template.max_concurrency is None and not template.holds and not rated:
        # One statement, also with the caller's id: a taken id inserts nothing.
        written = template.insert(args_json, kwargs_json, stamp, settings.ENQUEUE_ASYNC_COMMIT)
    else:
        try:
            with transaction.atomic(using=queue_db()):
                holder = _held_by(template, args, kwargs, stamp)
                if holder is not None:
                    return Created(
                        template, [(args_json, kwargs_json, holder, *stamp[1:])], {holder}
                    )
                if rated:
                    check_enqueue_rate(1)
                apply_queue_limit(template)
                template.job(args, kwargs, stamp).save(force_insert=True)
                signal(LOOP)
            written = True
        except IntegrityError:
            written = False
    # "ignore" hands out the existing job's handle: only when the job is the caller's.
    refused = not template.ignore_duplicates or not _owned_by(stamp.id, template.owner)
    if not written and owed is None and refused:
        raise DuplicateJobId(stamp.id)
    return Created(template, [(args_json, kwargs_json, *stamp)], set() if written else {stamp.id})


def apply_queue_limit(template: JobTemplate) -> None:
    """Set the queue's limit that ``queue={"name": ..., "max_concurrency": n}`` asks for.

    It is set as a runtime change does (the loop reads it at its next step, which the
    enqueue's wake-up starts), in the enqueue's transaction: the job and the limit it
    asked for commit together."""
    limit = template.max_concurrency
    if limit is None:
        return
    if not QueueSetting.objects.filter(name=template.queue, max_concurrency=limit).exists():
        store_queue_changes(template.queue, max_concurrency=limit)


def _held_by(
    template: JobTemplate, args: list[Any], kwargs: dict[str, Any], stamp: JobStamp
) -> str | None:
    """Return the id of the job that a plug-in's hold answers the call with, or None.

    Call it in the enqueue's transaction: what a hold writes commits with the job."""
    for hold in template.holds:
        holder = hold.hold(template, args, kwargs, stamp)
        if holder is not None:
            return holder
    return None


def _write_each_held(
    template: JobTemplate, calls: Iterable[Call], stamped: list[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], set[str]]:
    """Write the calls of a bulk enqueue whose template has holds, one by one, in order.

    Each call is held as one enqueue's would be; a call answered by another job (an
    earlier one of the same bulk enqueue too) gets that job's id, returned among the ids
    kept. Call it in the bulk enqueue's transaction (all or none). Return the stamped
    calls (``PER_JOB_COLUMNS``' order) and those ids."""
    kept: set[str] = set()
    answered: list[tuple[Any, ...]] = []
    for (args, kwargs), (args_json, kwargs_json, *stamp) in zip(calls, stamped, strict=True):
        holder = _held_by(template, args, kwargs, JobStamp(*stamp))
        if holder is None:
            check_enqueue_rate(1)
            if not _insert_own(template.job(args, kwargs, JobStamp(*stamp)), template):
                kept.add(stamp[0])
            answered.append((args_json, kwargs_json, *stamp))
        else:
            kept.add(holder)
            answered.append((args_json, kwargs_json, holder, *stamp[1:]))
    signal(LOOP)
    return answered, kept


def _insert_own(row: Job, template: JobTemplate) -> bool:
    """INSERT ``row``; return False when its id is one of the caller's jobs already.

    That one is kept with ``on_duplicate_id="ignore"``; any other taken id is a
    DuplicateJobId."""
    try:
        with transaction.atomic(using=queue_db()):
            row.save(force_insert=True)
    except IntegrityError:
        if not template.ignore_duplicates or not _owned_by(row.pk, template.owner):
            raise DuplicateJobId(row.pk) from None
        return False
    return True


def _owned_by(job_id: str, owner: str) -> bool:
    return Job.objects.filter(pk=job_id, owner=owner).exists()


def item_id(prefix: str, index: int) -> str:
    """Return the id of item ``index`` of a bulk enqueue with ``id=prefix``.

    Raise ValueError when it is longer than the id column holds."""
    job_id = f"{prefix}-{index}"
    if len(job_id) > JOB_ID_MAX_LENGTH:
        raise ValueError(
            f"id {prefix!r} is too long for {index + 1} jobs: their ids ({prefix}-0 ... "
            f"{job_id}) must be at most {JOB_ID_MAX_LENGTH} characters."
        )
    return job_id


def _stamp_items(
    target: Registered | str,
    template: JobTemplate,
    calls: Iterable[Call],
    owed: Owed | None,
    now: datetime,
) -> list[tuple[Any, ...]]:
    """Check and stamp each call of a bulk enqueue; return them in ``PER_JOB_COLUMNS``' order."""
    stamped: list[tuple[Any, ...]] = []
    for index, (args, kwargs) in enumerate(calls):
        _check_call(target, args, kwargs, f" of item {index}")
        args_json = check_json(f"arguments (item {index})", args)
        kwargs_json = check_json(f"keyword arguments (item {index})", kwargs)
        template.check_size(args_json, kwargs_json, f" (item {index})")
        # Apart by a microsecond each, so that the items' order is their arrival order.
        enqueued_at = now + timedelta(microseconds=index)
        job_id = None if template.id is None else item_id(template.id, index)
        stamped.append((args_json, kwargs_json, *_stamp(template, enqueued_at, owed, job_id)))
    return stamped


def _write_items(
    target: Registered | str,
    template: JobTemplate,
    calls: Iterable[Call],
    owed: Owed | None,
    now: datetime,
) -> Created:
    """Check and stamp each call of ``template``'s function, then write them all or none."""
    if template.holds:
        calls = list(calls)  # read twice: checked here, then written one by one
    stamped = _stamp_items(target, template, calls, owed, now)
    if not stamped:
        return Created(template, [], set())
    if owed is None:
        # The same read-only check as one enqueue: the loop reserves each job's cost when
        # it could start, so a batch is refused exactly when its first job would be.
        check_reservation_room(template.queue, template.cost, template.concurrency_key)
    with transaction.atomic(using=queue_db()):
        apply_queue_limit(template)
        if template.holds:
            return Created(template, *_write_each_held(template, calls, stamped))
        if owed is None:
            check_enqueue_rate(len(stamped))
        kept: set[str] = set()
        if template.id is None and queue_connection().vendor == "postgresql":
            template.row_copy.copy(stamped)
        else:
            rows = [
                template.job(json.loads(args), json.loads(kwargs), JobStamp(*stamp))
                for args, kwargs, *stamp in stamped
            ]
            if template.id is None:
                Job.objects.bulk_create(rows, batch_size=1000)
            else:
                kept = _insert_with_ids(template, rows, owed)
        signal(LOOP)
    return Created(template, stamped, kept)


def _insert_with_ids(template: JobTemplate, rows: list[Job], owed: Owed | None) -> set[str]:
    """INSERT rows with the caller's ids, and return the ids of the jobs kept.

    The INSERT decides which ids are taken: any taken id is a DuplicateJobId, but with
    ``on_duplicate_id="ignore"`` one of the caller's own jobs, which is kept instead
    (never another owner's); an owed job's taken id is kept whoever owns it."""
    error: IntegrityError | None = None
    kept: set[str] = set()
    while True:
        taken = dict(
            Job.objects.filter(id__in=[row.id for row in rows]).values_list("id", "owner")
        )
        for job_id, owner in taken.items():
            mine = template.ignore_duplicates and owner == template.owner
            if owed is None and not mine:
                raise DuplicateJobId(job_id)
        if error is not None and not taken:
            raise error  # the INSERT was refused for another reason than its ids
        kept.update(taken)
        rows = [row for row in rows if row.id not in taken]
        try:
            with transaction.atomic(using=queue_db()):
                Job.objects.bulk_create(rows, batch_size=1000)
        except IntegrityError as refused:
            error = refused  # ids committed since the read: read them again
            continue
        return kept

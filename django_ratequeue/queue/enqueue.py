"""Put work on a queue: ``enqueue`` and ``enqueue_many`` (``@job``: :mod:`.functions`).

Everything is validated before anything is written (:mod:`.options`), and one enqueue is
one INSERT of the job row, which commits or rolls back with the caller's transaction,
its ``LOOP`` signal too. docs/concepts.md ("Tables and who writes them", "One wake-up
protocol") tells why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import timedelta
from typing import Any, Protocol, TypeVar, Unpack, cast, overload

from django.db import IntegrityError, transaction

from .. import clock
from ..conf import ratequeue_settings
from ..exceptions import DuplicateJobId
from ..signals import announce, listened
from ..tracing import enqueue_span
from .batches import HandleList, batch_block
from .bounds import check_json
from .deduplicate import hold_key, write_each_holding_keys
from .handles import Handle
from .limits import store_queue_changes
from .models import Job, QueueSetting, queue_connection, queue_db
from .options import (
    PER_JOB_COLUMNS,
    EnqueueOptions,
    JobOptions,
    JobStamp,
    JobTemplate,
    check_enqueue_rate,
    check_reservation_room,
)
from .registry import (
    Registered,
    check_call,
    registered_job,
)
from .wakeup import LOOP, signal

JOB_ID_MAX_LENGTH = Job._meta.get_field("id").max_length or 200
R = TypeVar("R")
# One call of a job: its positional and its keyword arguments.
Call = tuple[list[Any], dict[str, Any]]


class HasOptions(Protocol):
    """A job function's default options (what ``@job`` and ``.using()`` set)."""

    options: JobOptions


def _target(func: Callable[..., Any] | str) -> tuple[Registered, JobOptions]:
    """Return the registered job that ``func`` names, and its default options.

    The options are a ``@job`` copy's own when ``func`` is one."""
    registered = registered_job(func.func if isinstance(func, Registered) else func)
    own = func if isinstance(func, Registered) else registered  # only @job registers jobs
    return registered, cast(HasOptions, own).options


@overload
def enqueue(
    func: Callable[..., Coroutine[Any, Any, R]],
    /,
    *,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[EnqueueOptions],
) -> Handle[R]: ...


@overload
def enqueue(
    func: Callable[..., R],
    /,
    *,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[EnqueueOptions],
) -> Handle[R]: ...


@overload
def enqueue(
    func: str,
    /,
    *,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[EnqueueOptions],
) -> Handle[Any]: ...


def enqueue(
    func: Callable[..., Any] | str,
    /,
    *positional: Any,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Handle[Any]:
    """Enqueue ``func(*args, **kwargs)`` with ``options``.

    The job's arguments come only through ``args`` and ``kwargs``, so that no keyword is
    ever taken for an option (or an option for an argument) by its name."""
    if positional:
        raise TypeError(
            "enqueue() takes the job's arguments as args=[...] and kwargs={...}, e.g. "
            "enqueue(func, args=[1, 2], queue='q'), or func.enqueue(1, 2) on a @job "
            "function (options through func.using(...))."
        )
    if not isinstance(args, list | tuple):
        raise ValueError(f"args must be a list or tuple, not {args!r}.")
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, Mapping):
        raise ValueError(f"kwargs must be a dict, not {kwargs!r}.")
    target, defaults = _target(func)
    return enqueue_call(target, defaults.merge(options), list(args), dict(kwargs))


def enqueue_job(
    func: Callable[..., Any] | str, *, args: list[Any], kwargs: dict[str, Any], **options: Any
) -> Job:
    """Enqueue as :func:`enqueue` does, and return the job as written rather than a handle.

    The HTTP API answers with it without reading it back. When
    ``on_duplicate_id="ignore"`` gave the existing job, return that one."""
    target, defaults = _target(func)
    template, stamp, written = _write_one(target, defaults.merge(options), args, kwargs)
    if not written:
        return Job.objects.get(pk=stamp.id)
    announce_enqueued(template, [stamp.id])
    job = template.job(args, kwargs, stamp)
    job._state.adding = False
    return job


def enqueue_call(
    target: Registered, options: JobOptions, args: list[Any], kwargs: dict[str, Any]
) -> Handle[Any]:
    """Enqueue one call of ``target`` with ``options``; return its handle."""
    template, stamp, written = _write_one(target, options, args, kwargs)
    if written:
        announce_enqueued(template, [stamp.id])
    return Handle(stamp.id, owner=template.owner)


def announce_enqueued(template: JobTemplate, job_ids: list[str]) -> None:
    """Announce ``job_enqueued`` for the jobs written, once their transaction commits."""
    if listened("job_enqueued"):
        records = [{"job_id": i, "func": template.func, "queue": template.queue} for i in job_ids]
        announce("job_enqueued", queue_db(), records)


def _write_one(
    target: Registered, options: JobOptions, args: list[Any], kwargs: dict[str, Any]
) -> tuple[JobTemplate, JobStamp, bool]:
    """Write one job; return its template, its stamp, and whether it was written.

    It was not when ``on_duplicate_id="ignore"`` found the caller's own job with that
    id. The write runs in an enqueue span (:mod:`django_ratequeue.tracing`), whose trace
    context the job keeps."""
    template = options.template(target.path)
    with enqueue_span(template.func, template.queue):
        return _write_checked(target, template, args, kwargs)


def _write_checked(
    target: Registered, template: JobTemplate, args: list[Any], kwargs: dict[str, Any]
) -> tuple[JobTemplate, JobStamp, bool]:
    """Check one call of ``template``'s function, then write it as :func:`_write_one` says."""
    check_call(target, args, kwargs)
    args_json = check_json("arguments", args)
    kwargs_json = check_json("keyword arguments", kwargs)
    template.check_size(args_json, kwargs_json)
    check_reservation_room(template.queue, template.cost, template.concurrency_key)
    settings = ratequeue_settings()
    stamp = template.stamp(clock.now())
    plain = template.max_concurrency is None and template.unique is None
    written = True
    if plain and settings.ENQUEUE_RATE_LIMIT is None:
        # One statement, also with the caller's id: a taken id inserts nothing.
        written = template.insert(args_json, kwargs_json, stamp, settings.ENQUEUE_ASYNC_COMMIT)
    else:
        try:
            with transaction.atomic(using=queue_db()):
                holder = hold_key(template, args, kwargs, stamp)
                if holder is not None:
                    return template, stamp._replace(id=holder), False
                check_enqueue_rate(1)
                apply_queue_limit(template)
                template.job(args, kwargs, stamp).save(force_insert=True)
                signal(LOOP)
        except IntegrityError:
            written = False
    # "ignore" hands out the existing job's handle: only when the job is the caller's.
    if not written and (not template.ignore_duplicates or not _owned_by(stamp.id, template.owner)):
        raise DuplicateJobId(stamp.id)
    return template, stamp, written


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


def _owned_by(job_id: str, owner: str) -> bool:
    return Job.objects.filter(pk=job_id, owner=owner).exists()


def _item_call(item: Any) -> Call:
    if isinstance(item, Mapping):
        return [], dict(item)
    if isinstance(item, list | tuple):
        return list(item), {}
    return [item], {}


@overload
def enqueue_many(
    func: Callable[..., Coroutine[Any, Any, R]],
    params: Iterable[Any],
    *,
    batch: bool | Mapping[str, Any] = False,
    **options: Unpack[EnqueueOptions],
) -> HandleList[R]: ...


@overload
def enqueue_many(
    func: Callable[..., R],
    params: Iterable[Any],
    *,
    batch: bool | Mapping[str, Any] = False,
    **options: Unpack[EnqueueOptions],
) -> HandleList[R]: ...


@overload
def enqueue_many(
    func: str,
    params: Iterable[Any],
    *,
    batch: bool | Mapping[str, Any] = False,
    **options: Unpack[EnqueueOptions],
) -> HandleList[Any]: ...


def enqueue_many(
    func: Callable[..., Any] | str,
    params: Iterable[Any],
    *,
    batch: bool | Mapping[str, Any] = False,
    **options: Any,
) -> HandleList[Any]:
    """Enqueue one job per item of ``params`` in one transaction, all or nothing.

    An item that is a dict gives keyword arguments, a list or tuple positional arguments,
    anything else the single argument. With ``id="x"`` the jobs get ids ``x-0``, ``x-1``, ...
    With ``batch=True`` (or a dict of :func:`.batches.batch` arguments) they make a new
    batch, whose handle is the returned list's ``batch``."""
    if batch is False:
        return _enqueue_items(func, params, options)
    block = batch_block(batch, options.get("owner"))
    with transaction.atomic(using=queue_db()), block as batch_handle:
        handles = _enqueue_items(func, params, options)
    handles.batch = batch_handle
    return handles


def _enqueue_items(
    func: Callable[..., Any] | str, params: Iterable[Any], options: Mapping[str, Any]
) -> HandleList[Any]:
    template, stamped, kept = _write_calls(func, map(_item_call, params), options)
    id_column = PER_JOB_COLUMNS.index("id")
    ids = [call[id_column] for call in stamped]
    announce_enqueued(template, [job_id for job_id in ids if job_id not in kept])
    return HandleList(Handle(job_id, owner=template.owner) for job_id in ids)


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


def _insert_with_ids(template: JobTemplate, rows: list[Job]) -> set[str]:
    """INSERT rows with the caller's ids, and return the ids of the jobs kept.

    The INSERT decides which ids are taken: any taken id is a DuplicateJobId, but with
    ``on_duplicate_id="ignore"`` one of the caller's own jobs, which is kept instead
    (never another owner's)."""
    error: IntegrityError | None = None
    kept: set[str] = set()
    while True:
        taken = dict(
            Job.objects.filter(id__in=[row.id for row in rows]).values_list("id", "owner")
        )
        for job_id, owner in taken.items():
            if not template.ignore_duplicates or owner != template.owner:
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


def enqueue_rows(func: Callable[..., Any] | str, calls: list[Call], **options: Any) -> list[Job]:
    """Enqueue one job per ``(args, kwargs)`` call, and return the jobs as written.

    As :func:`enqueue_many` does; where ``on_duplicate_id="ignore"`` kept the caller's
    existing job, return that one."""
    template, stamped, kept = _write_calls(func, calls, options)
    id_column = PER_JOB_COLUMNS.index("id")
    announce_enqueued(
        template, [call[id_column] for call in stamped if call[id_column] not in kept]
    )
    existing = Job.objects.in_bulk(list(kept)) if kept else {}
    rows = []
    for (args, kwargs), (_args, _kwargs, *stamp) in zip(calls, stamped, strict=True):
        row = template.job(args, kwargs, JobStamp(*stamp))
        row._state.adding = False
        rows.append(existing.get(row.pk, row))
    return rows


def _write_calls(
    func: Callable[..., Any] | str, calls: Iterable[Call], options: Mapping[str, Any]
) -> tuple[JobTemplate, list[tuple[Any, ...]], set[str]]:
    """Write one job per call, all or none; return what was written.

    That is their template, each job's arguments as JSON text and stamp
    (``PER_JOB_COLUMNS``' order), and the ids kept as they were. The write runs in an
    enqueue span, as :func:`_write_one`'s."""
    target, defaults = _target(func)
    template = defaults.merge(options).template(target.path)
    with enqueue_span(template.func, template.queue):
        return _write_stamped(target, template, calls)


def _write_stamped(
    target: Registered, template: JobTemplate, calls: Iterable[Call]
) -> tuple[JobTemplate, list[tuple[Any, ...]], set[str]]:
    """Check and stamp each call of ``template``'s function, then write them all or none."""
    now = clock.now()
    stamped: list[tuple[Any, ...]] = []
    if template.unique is not None:
        calls = list(calls)  # read twice: checked here, then written one by one
    for index, (args, kwargs) in enumerate(calls):
        check_call(target, args, kwargs, f" of item {index}")
        args_json = check_json(f"arguments (item {index})", args)
        kwargs_json = check_json(f"keyword arguments (item {index})", kwargs)
        template.check_size(args_json, kwargs_json, f" (item {index})")
        # Apart by a microsecond each, so that the items' order is their arrival order.
        enqueued_at = now + timedelta(microseconds=index)
        job_id = None if template.id is None else item_id(template.id, index)
        stamped.append((args_json, kwargs_json, *template.stamp(enqueued_at, job_id)))
    if not stamped:
        return template, [], set()
    # The same read-only check as one enqueue: the loop reserves each job's cost when it
    # could start, so a batch is refused exactly when its first job would be.
    check_reservation_room(template.queue, template.cost, template.concurrency_key)
    kept: set[str] = set()
    if template.unique is not None:
        with transaction.atomic(using=queue_db()):
            apply_queue_limit(template)
            return template, *write_each_holding_keys(template, calls, stamped)
    with transaction.atomic(using=queue_db()):
        check_enqueue_rate(len(stamped))
        apply_queue_limit(template)
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
                kept = _insert_with_ids(template, rows)
        signal(LOOP)
    return template, stamped, kept


__all__ = ["EnqueueOptions", "JobOptions", "enqueue", "enqueue_many"]

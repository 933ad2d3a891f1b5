"""Put work on a queue: ``enqueue`` and ``enqueue_many`` (``@job``: :mod:`.functions`).

Everything is validated before anything is written (:mod:`.options`), and one enqueue is
one INSERT of the job row (:mod:`.creation`, the path every job is written by), which
commits or rolls back with the caller's transaction, its ``LOOP`` signal too.
docs/concepts.md ("Tables and who writes them", "One wake-up protocol") tells why.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar, Unpack, overload

from django.db import transaction

from django_ratequeue.engine.creation import (
    JOB_ID_MAX_LENGTH,
    Call,
    create_jobs,
    item_id,
    job_target,
)
from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.models import Job, queue_db
from django_ratequeue.engine.options import EnqueueOptions, JobOptions, JobStamp
from django_ratequeue.engine.registry import Registered
from django_ratequeue.plugins.batches.grouping import HandleList, batch_block

R = TypeVar("R")


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
    target, defaults = job_target(func)
    return enqueue_call(target, defaults.merge(options), list(args), dict(kwargs))


def enqueue_job(
    func: Callable[..., Any] | str, *, args: list[Any], kwargs: dict[str, Any], **options: Any
) -> Job:
    """Enqueue as :func:`enqueue` does, and return the job as written rather than a handle.

    The HTTP API answers with it without reading it back. When
    ``on_duplicate_id="ignore"`` gave the existing job, return that one."""
    target, defaults = job_target(func)
    created = create_jobs(target, defaults.merge(options), [(args, kwargs)])
    (job_id,) = created.ids()
    if job_id in created.kept:
        return Job.objects.get(pk=job_id)
    (_args, _kwargs, *stamp) = created.stamped[0]
    job = created.template.job(args, kwargs, JobStamp(*stamp))
    job._state.adding = False
    return job


def enqueue_call(
    target: Registered, options: JobOptions, args: list[Any], kwargs: dict[str, Any]
) -> Handle[Any]:
    """Enqueue one call of ``target`` with ``options``; return its handle."""
    created = create_jobs(target, options, [(args, kwargs)])
    return Handle(created.ids()[0], owner=created.template.owner)


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
    target, defaults = job_target(func)
    created = create_jobs(target, defaults.merge(options), map(_item_call, params), items=True)
    owner = created.template.owner
    return HandleList(Handle(job_id, owner=owner) for job_id in created.ids())


def enqueue_rows(func: Callable[..., Any] | str, calls: list[Call], **options: Any) -> list[Job]:
    """Enqueue one job per ``(args, kwargs)`` call, and return the jobs as written.

    As :func:`enqueue_many` does; where ``on_duplicate_id="ignore"`` kept the caller's
    existing job, return that one."""
    target, defaults = job_target(func)
    created = create_jobs(target, defaults.merge(options), calls, items=True)
    existing = Job.objects.in_bulk(list(created.kept)) if created.kept else {}
    rows = []
    for (args, kwargs), (_args, _kwargs, *stamp) in zip(calls, created.stamped, strict=True):
        row = created.template.job(args, kwargs, JobStamp(*stamp))
        row._state.adding = False
        rows.append(existing.get(row.pk, row))
    return rows


__all__ = [
    "JOB_ID_MAX_LENGTH",
    "Call",
    "EnqueueOptions",
    "JobOptions",
    "enqueue",
    "enqueue_many",
    "item_id",
]

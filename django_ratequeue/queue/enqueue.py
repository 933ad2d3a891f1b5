"""Put work on a queue: ``@job``, ``enqueue`` and ``enqueue_many``.

Everything is validated before anything is written (:mod:`.options`), and one enqueue is
one INSERT of the job row, which commits or rolls back with the caller's transaction,
its ``LOOP`` signal too. docs/concepts.md ("Tables and who writes them", "One wake-up
protocol") tells why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import timedelta
from functools import update_wrapper
from typing import Any, Generic, ParamSpec, Protocol, Self, TypeVar, Unpack, cast, overload

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction

from .. import clock
from ..conf import ratequeue_settings
from ..exceptions import DuplicateJobId
from .bounds import check_json
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
    ExposedHooks,
    Registered,
    check_call,
    exposed_hooks,
    is_async,
    register_job,
    registered_job,
)
from .wakeup import LOOP, signal

P = ParamSpec("P")
JOB_ID_MAX_LENGTH = Job._meta.get_field("id").max_length or 200
R = TypeVar("R")
# One call of a job: its positional and its keyword arguments.
Call = tuple[list[Any], dict[str, Any]]


class JobFunction(Registered, Generic[P, R]):
    """Wrap a module-level function decorated with ``@job``: run it here and now, or enqueue it.

    Call it to run it here and now, or ``.enqueue(...)`` it with the function's own
    arguments (checked by a type checker as a call would be); ``.using(**options)``
    returns a copy with other options. ``R`` is what its job's handle gives back
    (:class:`AsyncJobFunction`: the awaited result)."""

    func: Callable[P, Any]

    def __init__(
        self, func: Callable[P, Any], options: JobOptions, exposed: ExposedHooks | None = None
    ) -> None:
        super().__init__(func, exposed)
        self.options = options
        update_wrapper(self, func)

    @staticmethod
    def of(
        func: Callable[..., Any], options: JobOptions, exposed: ExposedHooks | None = None
    ) -> JobFunction[..., Any]:
        """Return the job function of ``func``: an :class:`AsyncJobFunction` for ``async def``."""
        cls = AsyncJobFunction if is_async(func) else JobFunction
        return cls(func, options, exposed)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast("R", self.func(*args, **kwargs))

    def __repr__(self) -> str:
        return f"<job {self.func.__module__}.{self.func.__qualname__}>"

    def using(self, **options: Unpack[EnqueueOptions]) -> Self:
        return type(self)(self.func, self.options.merge(options))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle[R]:
        """Enqueue ``func(*args, **kwargs)``, every keyword being the function's own.

        A keyword is never an option (options go through :meth:`using`)."""
        return _enqueue_one(registered_job(self.func), self.options, list(args), kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle[R]:
        """Enqueue as :meth:`enqueue` does, from async code (an async view, an ``async def`` job).

        The INSERT runs in Django's thread for sync code."""
        enqueue = sync_to_async(self.enqueue, thread_sensitive=True)
        return await enqueue(*args, **kwargs)

    def enqueue_many(
        self, params: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> list[Handle[R]]:
        return enqueue_many(self, params, **options)


class AsyncJobFunction(JobFunction[P, R]):
    """Wrap an ``async def`` function decorated with ``@job``, whose job runs on an event loop.

    Its job runs on a worker's event loop, and its handle gives back the awaited result
    ``R``. Called, it returns the coroutine, as the function does."""

    func: Callable[P, Coroutine[Any, Any, R]]

    # A call gives the coroutine, whose awaited result the handles give back.
    def __call__(  # type: ignore[override]
        self, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, R]:
        return self.func(*args, **kwargs)


class JobDecorator(Protocol):
    """What ``@job(...)`` with options returns: the decorator proper."""

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> AsyncJobFunction[P, R]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> JobFunction[P, R]: ...


@overload
def job(
    func: Callable[P, Coroutine[Any, Any, R]],
    /,
    *,
    expose: bool = False,
    permission: Callable[..., bool] | None = None,
    http_options: Callable[..., Mapping[str, Any]] | None = None,
    **options: Unpack[EnqueueOptions],
) -> AsyncJobFunction[P, R]: ...


@overload
def job(
    func: Callable[P, R],
    /,
    *,
    expose: bool = False,
    permission: Callable[..., bool] | None = None,
    http_options: Callable[..., Mapping[str, Any]] | None = None,
    **options: Unpack[EnqueueOptions],
) -> JobFunction[P, R]: ...


@overload
def job(
    func: None = None,
    /,
    *,
    expose: bool = False,
    permission: Callable[..., bool] | None = None,
    http_options: Callable[..., Mapping[str, Any]] | None = None,
    **options: Unpack[EnqueueOptions],
) -> JobDecorator: ...


def job(
    func: Callable[..., Any] | None = None,
    /,
    *,
    expose: bool = False,
    permission: Callable[..., bool] | None = None,
    http_options: Callable[..., Mapping[str, Any]] | None = None,
    **options: Any,
) -> JobFunction[..., Any] | JobDecorator:
    """Register a module-level function as a job, to be enqueued and run by workers.

    It can then be enqueued (itself or its dotted path) with default options, and
    workers run it. ``@job`` and ``@job(queue="emails", retries=3, timeout=30, ...)``
    both work; so does ``job(func)`` for a function whose module must not import
    ratequeue. Decorating a job again gives a copy with more options; the registered job
    keeps its own.

    ``expose=True`` lets the HTTP API enqueue it, for the users ``permission(request)``
    admits, with the options ``http_options(request, args, kwargs)`` adds (see
    docs/http-api.md).
    """
    defaults = {k: v for k, v in options.items() if v is not None}
    job_options = JobOptions(defaults)
    exposed = exposed_hooks(expose, permission, http_options)

    def decorate(f: Callable[..., Any], /) -> JobFunction[..., Any]:
        if isinstance(f, JobFunction):
            if exposed is not None:
                raise ValueError(
                    f"{f.path} is a job already: give expose= where it is first decorated "
                    "with @job, which is the job the HTTP API finds."
                )
            register_job(f)
            return type(f)(f.func, f.options.merge(defaults))
        return register_job(JobFunction.of(f, job_options, exposed))

    return decorate(func) if func is not None else cast("JobDecorator", decorate)


def _target(func: Callable[..., Any] | str) -> tuple[Registered, JobOptions]:
    """Return the registered job that ``func`` names and its default options.

    The default options of a ``@job`` copy are its own."""
    registered = registered_job(func.func if isinstance(func, JobFunction) else func)
    if not isinstance(func, JobFunction):
        func = cast("JobFunction[..., Any]", registered)  # only @job registers jobs
    return registered, func.options


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
    return _enqueue_one(target, defaults.merge(options), list(args), dict(kwargs))


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
    job = template.job(args, kwargs, stamp)
    job._state.adding = False
    return job


def _enqueue_one(
    target: Registered, options: JobOptions, args: list[Any], kwargs: dict[str, Any]
) -> Handle[Any]:
    template, stamp, _written = _write_one(target, options, args, kwargs)
    return Handle(stamp.id, owner=template.owner)


def _write_one(
    target: Registered, options: JobOptions, args: list[Any], kwargs: dict[str, Any]
) -> tuple[JobTemplate, JobStamp, bool]:
    """Write one job; return its template, its stamp, and whether it was written.

    It was not when ``on_duplicate_id="ignore"`` found the caller's own job with that
    id."""
    template = options.template(target.path)
    check_call(target, args, kwargs)
    args_json = check_json("arguments", args)
    kwargs_json = check_json("keyword arguments", kwargs)
    template.check_size(args_json, kwargs_json)
    check_reservation_room(template.queue, template.cost)
    settings = ratequeue_settings()
    stamp = template.stamp(clock.now())
    plain = template.max_concurrency is None and template.id is None
    written = True
    if plain and settings.ENQUEUE_RATE_LIMIT is None:
        template.insert(args_json, kwargs_json, stamp, settings.ENQUEUE_ASYNC_COMMIT)
    else:
        try:
            with transaction.atomic(using=queue_db()):
                check_enqueue_rate(1)
                apply_queue_limit(template)
                template.job(args, kwargs, stamp).save(force_insert=True)
                signal(LOOP)
        except IntegrityError:
            # "ignore" hands out the existing job's handle: only when the job is the caller's.
            if not template.ignore_duplicates or not _owned_by(stamp.id, template.owner):
                raise DuplicateJobId(stamp.id) from None
            written = False
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
    **options: Unpack[EnqueueOptions],
) -> list[Handle[R]]: ...


@overload
def enqueue_many(
    func: Callable[..., R], params: Iterable[Any], **options: Unpack[EnqueueOptions]
) -> list[Handle[R]]: ...


@overload
def enqueue_many(
    func: str, params: Iterable[Any], **options: Unpack[EnqueueOptions]
) -> list[Handle[Any]]: ...


def enqueue_many(
    func: Callable[..., Any] | str, params: Iterable[Any], **options: Any
) -> list[Handle[Any]]:
    """Enqueue one job per item of ``params`` in one transaction, all or nothing.

    An item that is a dict gives keyword arguments, a list or tuple positional arguments,
    anything else the single argument. With ``id="x"`` the jobs get ids ``x-0``, ``x-1``, ...
    """
    template, stamped, _kept = _write_calls(func, map(_item_call, params), options)
    id_column = PER_JOB_COLUMNS.index("id")
    return [Handle(call[id_column], owner=template.owner) for call in stamped]


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
    (``PER_JOB_COLUMNS``' order), and the ids kept as they were."""
    target, defaults = _target(func)
    template = defaults.merge(options).template(target.path)
    now = clock.now()
    stamped: list[tuple[Any, ...]] = []
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
    check_reservation_room(template.queue, template.cost)
    kept: set[str] = set()
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


__all__ = [
    "AsyncJobFunction",
    "EnqueueOptions",
    "JobFunction",
    "JobOptions",
    "enqueue",
    "enqueue_many",
    "job",
]

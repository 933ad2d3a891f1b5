"""Job functions: ``@job`` registers a function and returns what enqueues it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import timedelta
from functools import update_wrapper
from typing import (
    Any,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from asgiref.sync import sync_to_async

from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.options import EnqueueOptions, JobOptions
from django_ratequeue.engine.registry import (
    ExposedHooks,
    Registered,
    exposed_hooks,
    is_async,
    job_path,
    register_job,
    registered_job,
)
from django_ratequeue.intake.enqueue import enqueue_call, enqueue_many
from django_ratequeue.plugins.batches.grouping import HandleList
from django_ratequeue.plugins.schedules.declarations import declare_in_code

P = ParamSpec("P")
R = TypeVar("R")


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
        return enqueue_call(registered_job(self.func), self.options, list(args), kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle[R]:
        """Enqueue as :meth:`enqueue` does, from async code (an async view, an ``async def`` job).

        The INSERT runs in Django's thread for sync code."""
        enqueue = sync_to_async(self.enqueue, thread_sensitive=True)
        return await enqueue(*args, **kwargs)

    def enqueue_many(
        self,
        params: Iterable[Any],
        *,
        batch: bool | Mapping[str, Any] = False,
        **options: Unpack[EnqueueOptions],
    ) -> HandleList[R]:
        return enqueue_many(self, params, batch=batch, **options)


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
    schedule: str | float | timedelta | None = None,
    timezone: str | None = None,
    misfire: Literal["skip", "once", "all"] | None = None,
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
    schedule: str | float | timedelta | None = None,
    timezone: str | None = None,
    misfire: Literal["skip", "once", "all"] | None = None,
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
    schedule: str | float | timedelta | None = None,
    timezone: str | None = None,
    misfire: Literal["skip", "once", "all"] | None = None,
    **options: Unpack[EnqueueOptions],
) -> JobDecorator: ...


def job(
    func: Callable[..., Any] | None = None,
    /,
    *,
    expose: bool = False,
    permission: Callable[..., bool] | None = None,
    http_options: Callable[..., Mapping[str, Any]] | None = None,
    schedule: str | float | timedelta | None = None,
    timezone: str | None = None,
    misfire: Literal["skip", "once", "all"] | None = None,
    **options: Any,
) -> JobFunction[..., Any] | JobDecorator:
    """Register a module-level function as a job, to be enqueued and run by workers.

    It can then be enqueued (itself or its dotted path) with default options, and
    workers run it. ``@job`` and ``@job(queue="emails", retries=3, timeout=30, ...)``
    both work; so does ``job(func)`` for a function whose module must not import
    ratequeue. Decorating a job again gives a copy with more options; the registered job
    keeps its own.

    ``expose=True`` lets the HTTP API enqueue it, for the users ``permission(request)``
    admits, with the options ``http_options(request, args, kwargs)`` adds.

    ``schedule`` (a cron expression, or seconds between runs) makes it recurring, in
    ``timezone`` (UTC by default), with a ``misfire`` policy (see docs/schedules.md).
    """
    defaults = {k: v for k, v in options.items() if v is not None}
    job_options = JobOptions(defaults)
    exposed = exposed_hooks(expose, permission, http_options)
    if schedule is None and (timezone is not None or misfire is not None):
        raise ValueError("timezone= and misfire= are for a recurring job: add schedule=.")

    def decorate(f: Callable[..., Any], /) -> JobFunction[..., Any]:
        if schedule is not None:
            declare_in_code(job_path(getattr(f, "func", f)), schedule, timezone, misfire)
        if isinstance(f, JobFunction):
            return _decorated_again(f, defaults, exposed)
        return register_job(JobFunction.of(f, job_options, exposed))

    return decorate(func) if func is not None else cast("JobDecorator", decorate)


def _decorated_again(
    f: JobFunction[..., Any], defaults: Mapping[str, Any], exposed: ExposedHooks | None
) -> JobFunction[..., Any]:
    """Return a copy of job ``f`` with more options; the registered job keeps its own."""
    if exposed is not None:
        raise ValueError(
            f"{f.path} is a job already: give expose= where it is first decorated "
            "with @job, which is the job the HTTP API finds."
        )
    register_job(f)
    return type(f)(f.func, f.options.merge(defaults))


__all__ = ["AsyncJobFunction", "JobDecorator", "JobFunction", "job"]

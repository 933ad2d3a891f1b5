"""Putting work on a queue: ``@job``, ``enqueue`` and ``enqueue_many``.

Everything is validated before anything is written, and one enqueue is one INSERT of the
job row: the main loop finds WAITING jobs through an index, so enqueue never touches a row
the loop owns. Inside a caller's transaction the job commits or rolls back with it; the loop
is woken after commit.

The single enqueue is a hot path, so what does not change between calls is kept per
function: its dotted path, that it imports, its signature, and its options checked once
(:class:`JobTemplate`) with the INSERT that writes them (:class:`.bulk.RowInsert`: the
session prepares it on the server, and a call sends only the columns that differ from job
to job). The kick after commit skips
its read of the loop's state when this process saw the loop running less than a ``SEGMENT``
ago: a running pass sees the new job in its next step, and a pass that rests keeps looking
for new work for a SEGMENT before it ends (:meth:`.loop.Loop.watch_for_skipped_kicks`).
Only a pass run by the watchdog does not; a job it misses is found by the watchdog's check
for forgotten work (:func:`.watchdog.wake_forgotten_work`), at worst
``FORGOTTEN_WORK_CHECKS`` watchdog intervals (2 s by default) later.
"""

from __future__ import annotations

import inspect
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache, cached_property, lru_cache, partial, update_wrapper
from importlib import import_module
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ..conf import ratequeue_settings
from ..exceptions import DuplicateJobId, EnqueueRateLimited
from ..ratelimit.config import RateLimitConfig, parse_config
from .bulk import RowInsert, insert_rows
from .handles import Handle, owner_label
from .loop import wake_loop
from .models import Job, LoopStatus, Status, new_job_id
from .retry import Retry
from .subtasks import current_job_id

OPTION_NAMES = frozenset(
    {
        "queue",
        "concurrency_key",
        "start_at",
        "run_after",
        "retries",
        "id",
        "on_duplicate_id",
        "priority",
        "timeout",
        "on_complete",
        "context",
        "owner",
        "cost",
    }
)
DEFAULT_QUEUE = "default"


def function_path(func: Callable[..., Any] | str, what: str = "job function") -> str:
    """The dotted path of a module-level function, checked to import back to a callable."""
    try:
        return _known_function_path(func, what)
    except TypeError:  # unhashable: not cached
        return _function_path(func, what)


@lru_cache(maxsize=1024)
def _known_function_path(func: Callable[..., Any] | str, what: str) -> str:
    return _function_path(func, what)


def _function_path(func: Callable[..., Any] | str, what: str) -> str:
    if isinstance(func, JobFunction):
        func = func.func
    if isinstance(func, str):
        path = func
    elif callable(func) and hasattr(func, "__module__") and hasattr(func, "__qualname__"):
        if "<" in func.__qualname__ or "." in func.__qualname__:
            raise ValueError(
                f"The {what} {func.__qualname__!r} is not a module-level function; "
                "define it at the top level of a module so that workers can import it."
            )
        path = f"{func.__module__}.{func.__qualname__}"
    else:
        raise ValueError(f"The {what} must be a function or a dotted path, not {func!r}.")
    import_function(path, what)
    return path


def import_function(path: str, what: str = "job function") -> Callable[..., Any]:
    module_name, _, name = path.rpartition(".")
    try:
        target = getattr(import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError, ValueError):
        target = None
    if not callable(target):
        raise ValueError(
            f"Unknown {what} {path!r}: give a module-level function or its dotted path "
            "('package.module.function')."
        )
    return target


def check_json(what: str, value: Any) -> str:
    """``value`` as JSON text, or a ValueError saying what to pass instead."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"The job's {what} must be JSON-serialisable ({exc}); pass plain data such as "
            "ids, strings, numbers, lists and dicts."
        ) from None


def _seconds(name: str, value: Any, *, allow_zero: bool = True) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds or a timedelta, not {value!r}.")
    if value < 0 or (value == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "more than 0"
        raise ValueError(f"{name} must be {bound} seconds, got {value!r}.")
    return float(value)


def _start_at(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"start_at {value!r} is not an ISO-8601 date and time, "
                "e.g. '2026-04-03T12:00:00Z'."
            ) from None
    if not isinstance(value, datetime):
        raise ValueError(f"start_at must be a datetime or an ISO-8601 string, not {value!r}.")
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value


@dataclass(frozen=True)
class QueueChoice:
    name: str = DEFAULT_QUEUE
    max_concurrency: int | None = None

    @classmethod
    def coerce(cls, value: Any) -> QueueChoice:
        if value is None:
            return cls()
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, Mapping):
            raise ValueError(
                f"queue must be a name or {{'name': ..., 'max_concurrency': n}}, not {value!r}."
            )
        unknown = sorted(set(value) - {"name", "max_concurrency"})
        if unknown:
            raise ValueError(f"Unknown queue option(s): {', '.join(unknown)}.")
        name = value.get("name")
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ValueError(
                f"A queue name must be a non-empty string of at most 200 characters, not {name!r}."
            )
        limit = value.get("max_concurrency")
        ceiling = ratequeue_settings()["MAX_QUEUE_CONCURRENCY"]
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= ceiling
        ):
            raise ValueError(
                f"max_concurrency of queue {name!r} must be an integer from 0 (paused) to "
                f"MAX_QUEUE_CONCURRENCY ({ceiling}), got {limit!r}."
            )
        return cls(name=name, max_concurrency=limit)


class JobStamp(NamedTuple):
    """The columns of a new job that neither its options nor its arguments decide."""

    id: str
    status: Status
    start_at: datetime
    created_at: datetime
    parent_id: str


# What differs from job to job of one template, in the order JobTemplate.insert sends it.
PER_JOB_COLUMNS = ("args", "kwargs", *JobStamp._fields)


@dataclass(frozen=True)
class JobTemplate:
    """What a job's options decide, checked once: a job is a template plus its arguments,
    an id and the time it was enqueued. ``start_at`` is fixed, ``run_after`` counts from
    the enqueue."""

    func: str
    queue: str
    max_concurrency: int | None
    concurrency_key: str
    priority: int
    start_at: datetime | None
    run_after: timedelta | None
    retry: dict[str, Any]
    timeout: float | None
    on_complete: str
    context: Any
    owner: str
    cost: int
    id: str | None
    ignore_duplicates: bool

    @cached_property
    def columns(self) -> dict[str, Any]:
        """The job's columns that every job of this template shares: what the options
        decide, and the model's defaults for the rest (no attempts yet, no result...)."""
        decided = {
            "func": self.func,
            "queue": self.queue,
            "max_concurrency": self.max_concurrency,
            "concurrency_key": self.concurrency_key,
            "priority": self.priority,
            "retry": self.retry,
            "timeout": self.timeout,
            "on_complete": self.on_complete,
            "context": self.context,
            "owner": self.owner,
            "cost": self.cost,
        }
        defaults = {
            field.attname: field.get_default()
            for field in Job._meta.concrete_fields
            if field.attname not in decided and field.attname not in PER_JOB_COLUMNS
        }
        return {**defaults, **decided}

    @cached_property
    def row_insert(self) -> RowInsert:
        return RowInsert(Job, self.columns, PER_JOB_COLUMNS)

    def stamp(self, now: datetime, job_id: str | None = None) -> JobStamp:
        """Id, status and times of a job enqueued ``now``."""
        start_at = self.start_at or (now + self.run_after if self.run_after else now)
        status = Status.SCHEDULED if start_at > now else Status.WAITING
        return JobStamp(job_id or self.id or new_job_id(), status, start_at, now, current_job_id())

    def job(self, args: list[Any], kwargs: dict[str, Any], stamp: JobStamp) -> Job:
        """An unsaved Job."""
        return Job(**self.columns, args=args, kwargs=kwargs, **stamp._asdict())

    def insert(self, args: str, kwargs: str, stamp: JobStamp, async_commit: bool) -> None:
        """INSERT a job whose arguments are given as JSON text, without building a Job."""
        adapt = connection.ops.adapt_datetimefield_value
        self.row_insert.execute(
            (
                args,
                kwargs,
                stamp.id,
                stamp.status,
                adapt(stamp.start_at),
                adapt(stamp.created_at),
                stamp.parent_id,
            ),
            async_commit,
        )


@dataclass(frozen=True)
class JobOptions:
    """The enqueue options; ``merge`` applies a call's options over defaults, ``template``
    validates them for one function."""

    values: Mapping[str, Any] = field(default_factory=dict)
    # path -> (the settings it was checked under, its template)
    _templates: dict[str, tuple[dict[str, Any], JobTemplate]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        unknown = sorted(set(self.values) - OPTION_NAMES)
        if unknown:
            raise ValueError(
                f"Unknown enqueue option(s): {', '.join(unknown)}; "
                f"known: {', '.join(sorted(OPTION_NAMES))}."
            )

    def merge(self, other: Mapping[str, Any]) -> JobOptions:
        return JobOptions({**self.values, **other}) if other else self

    def template(self, path: str) -> JobTemplate:
        """The options checked for the function at ``path``; raises ValueError naming what
        to fix. Kept while the settings stay the same: a function's own options (``@job``)
        are checked once, not at every enqueue."""
        settings = ratequeue_settings()
        known = self._templates.get(path)
        if known is not None and known[0] is settings:
            return known[1]
        template = self._check(path)
        self._templates[path] = (settings, template)
        return template

    def _check(self, path: str) -> JobTemplate:
        options = self.values
        queue = QueueChoice.coerce(options.get("queue"))
        key = options.get("concurrency_key") or ""
        if not isinstance(key, str) or len(key) > 255:
            raise ValueError(
                f"concurrency_key must be a string of at most 255 characters, not {key!r}."
            )
        if options.get("start_at") is not None and options.get("run_after") is not None:
            raise ValueError("Give start_at or run_after, not both.")
        start_at = run_after = None
        if options.get("start_at") is not None:
            start_at = _start_at(options["start_at"])
        elif options.get("run_after") is not None:
            run_after = timedelta(seconds=_seconds("run_after", options["run_after"]))
        retry = Retry.coerce(options.get("retries"))
        priority = options.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"priority must be an integer, not {priority!r}.")
        timeout = options.get("timeout")
        if timeout is not None:
            timeout = _seconds("timeout", timeout, allow_zero=False)
        on_complete = options.get("on_complete")
        on_complete_path = (
            "" if on_complete is None else function_path(on_complete, "on_complete callback")
        )
        context = options.get("context")
        check_json("context", context)
        cost = options.get("cost", 1)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ValueError(f"cost must be a non-negative integer, not {cost!r}.")
        job_id = options.get("id")
        if job_id is not None and (not isinstance(job_id, str) or not job_id or len(job_id) > 200):
            raise ValueError(
                f"id must be a non-empty string of at most 200 characters, not {job_id!r}."
            )
        on_duplicate_id = options.get("on_duplicate_id", "error")
        if on_duplicate_id not in ("error", "ignore"):
            raise ValueError("on_duplicate_id must be 'error' or 'ignore'.")
        return JobTemplate(
            func=path,
            queue=queue.name,
            max_concurrency=queue.max_concurrency,
            concurrency_key=key,
            priority=priority,
            start_at=start_at,
            run_after=run_after,
            retry=retry.to_json(),
            timeout=timeout,
            on_complete=on_complete_path,
            context=context,
            owner=owner_label(options.get("owner")),
            cost=cost,
            id=job_id,
            ignore_duplicates=on_duplicate_id == "ignore",
        )


ENQUEUE_LIMIT_NAME = "ratequeue:enqueue"


def enqueue_rate_config() -> RateLimitConfig | None:
    """ENQUEUE_RATE_LIMIT as a rate-limit config (a token bucket unless its dict names
    another kind); None when it is off. Raises ``ValueError`` when it does not parse."""
    config = ratequeue_settings()["ENQUEUE_RATE_LIMIT"]
    if config is None:
        return None
    if isinstance(config, Mapping):
        config = {"kind": "token bucket", **config}
    return parse_config(config)


def check_enqueue_rate(count: int) -> None:
    """Draw ``count`` from ENQUEUE_RATE_LIMIT (a leaky bucket), or raise
    :class:`EnqueueRateLimited` before anything is written. Off when the setting is None.

    It is drawn in the caller's transaction, so a rolled-back enqueue gives its tokens back.
    """
    config = enqueue_rate_config()
    if config is None:
        return
    from ..ratelimit.api import rate_limit

    decision = rate_limit(ENQUEUE_LIMIT_NAME, count=count, config=config)
    if not decision.ok:
        raise EnqueueRateLimited(ENQUEUE_LIMIT_NAME, None, decision.retry_at)


def check_reservation_room(queue: str, cost: int) -> None:
    """Refuse work for a rate-gated queue whose limit has reserved ``max_reserved`` tokens
    ahead already: :class:`RateLimited` says when it would be admitted. Only a read; the
    loop reserves the tokens when the job could start."""
    limit = (ratequeue_settings()["QUEUES"].get(queue) or {}).get("rate_limit")
    if limit is None or cost == 0:
        return
    from ..ratelimit.api import check_rate_limit

    check_rate_limit(limit, count=cost, reserve=True, throws=True)


@cache
def _declared_parameters(func: Callable[..., Any]) -> frozenset[str]:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in named)


def _split_call(
    target: Callable[..., Any], args: tuple[Any, ...], keywords: dict[str, Any]
) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Separate the job's own arguments from enqueue options.

    ``enqueue(f, args=(...), kwargs={...}, **options)`` is explicit. Otherwise keywords go to
    the function, except those named like an option that the function does not declare.
    """
    declared = _declared_parameters(target)
    explicit = {"args", "kwargs"} & (set(keywords) - declared)
    if explicit:
        if args:
            raise ValueError(
                "Pass the job's positional arguments either inline or as args=, not both."
            )
        call_args = keywords.pop("args", ())
        call_kwargs = keywords.pop("kwargs", None) or {}
        if not isinstance(call_args, list | tuple):
            raise ValueError(f"args must be a list or tuple, not {call_args!r}.")
        if not isinstance(call_kwargs, Mapping):
            raise ValueError(f"kwargs must be a dict, not {call_kwargs!r}.")
        return list(call_args), dict(call_kwargs), keywords
    options = {k: keywords.pop(k) for k in list(keywords) if k in OPTION_NAMES - declared}
    return list(args), keywords, options


class JobFunction:
    """A module-level function decorated with ``@job``: call it to run it here and now, or
    ``.enqueue(...)`` it; ``.using(**options)`` returns a copy with other options."""

    def __init__(self, func: Callable[..., Any], options: JobOptions) -> None:
        self.func = func
        self.options = options
        update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.func.__module__}.{self.func.__qualname__}>"

    def using(self, **options: Any) -> JobFunction:
        return JobFunction(self.func, self.options.merge(options))

    def enqueue(self, *args: Any, **kwargs: Any) -> Handle:
        return _enqueue_one(self.func, self.options, list(args), kwargs)

    def enqueue_many(self, params: Iterable[Any], **options: Any) -> list[Handle]:
        return enqueue_many(self, params, **options)


def job(
    func: Callable[..., Any] | None = None,
    /,
    *,
    queue: Any = None,
    retries: Any = None,
    timeout: Any = None,
    **options: Any,
) -> Any:
    """Decorate a module-level function so it can be enqueued with default options.

    ``@job`` and ``@job(queue="emails", retries=3, timeout=30, ...)`` both work.
    """
    defaults = {
        k: v
        for k, v in {"queue": queue, "retries": retries, "timeout": timeout, **options}.items()
        if v is not None
    }
    job_options = JobOptions(defaults)

    def decorate(f: Callable[..., Any]) -> JobFunction:
        return JobFunction(f, job_options)

    return decorate(func) if func is not None else decorate


def _target(func: Callable[..., Any] | str) -> tuple[str, Callable[..., Any], JobOptions]:
    """The path, the plain function and the default options of what is enqueued."""
    try:
        return _known_target(func)
    except TypeError:  # unhashable: not cached
        return _find_target(func)


@lru_cache(maxsize=1024)
def _known_target(func: Callable[..., Any] | str) -> tuple[str, Callable[..., Any], JobOptions]:
    return _find_target(func)


def _find_target(func: Callable[..., Any] | str) -> tuple[str, Callable[..., Any], JobOptions]:
    path = function_path(func)
    target = func if not isinstance(func, str) else import_function(path)
    if isinstance(target, JobFunction):
        return path, target.func, target.options
    return path, target, JobOptions()


def enqueue(func: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Handle:
    """Enqueue ``func(*args, **kwargs)``; see :func:`_split_call` for where options go."""
    _path, target, defaults = _target(func)
    call_args, call_kwargs, options = _split_call(target, args, dict(kwargs))
    return _enqueue_one(func, defaults.merge(options), call_args, call_kwargs)


def _enqueue_one(
    func: Callable[..., Any] | str, options: JobOptions, args: list[Any], kwargs: dict[str, Any]
) -> Handle:
    template = options.template(function_path(func))
    args_json = check_json("arguments", args)
    kwargs_json = check_json("keyword arguments", kwargs)
    check_reservation_room(template.queue, template.cost)
    settings = ratequeue_settings()
    stamp = template.stamp(timezone.now())
    if template.id is None and settings["ENQUEUE_RATE_LIMIT"] is None:
        template.insert(args_json, kwargs_json, stamp, settings["ENQUEUE_ASYNC_COMMIT"])
    else:
        try:
            with transaction.atomic():
                check_enqueue_rate(1)
                template.job(args, kwargs, stamp).save(force_insert=True)
        except IntegrityError:
            if not template.ignore_duplicates:
                raise DuplicateJobId(stamp.id) from None
    transaction.on_commit(_wake_up(stamp.start_at, stamp.created_at), robust=True)
    return Handle(stamp.id, owner=template.owner)


# When this process last read the loop's state as running (time.time()).
_seen_running_at = -math.inf


def wake_after_enqueue(start_at: datetime, enqueued_at: datetime) -> None:
    """Kick the loop for a committed job, unless it is due now and this process saw the
    loop running less than a SEGMENT ago, shortly before the job was enqueued (see the
    module docstring for why that is safe, and what it may cost)."""
    global _seen_running_at
    segment = ratequeue_settings()["SEGMENT"]
    seen = _seen_running_at
    if (
        start_at <= enqueued_at
        and time.time() - seen <= segment
        and enqueued_at.timestamp() >= seen - segment
    ):
        return
    before = time.time()
    if wake_loop(start_at) == LoopStatus.RUNNING:
        _seen_running_at = before


def _wake_up(start_at: datetime, enqueued_at: datetime) -> Callable[[], None]:
    """:func:`wake_after_enqueue` as an ``on_commit`` callback that keeps its name: Django
    logs a robust callback's failure (a lost connection) by ``__qualname__``, which a bare
    ``partial`` lacks, and the enqueue, already committed, would raise AttributeError."""
    return update_wrapper(partial(wake_after_enqueue, start_at, enqueued_at), wake_after_enqueue)


def _item_call(item: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(item, Mapping):
        return [], dict(item)
    if isinstance(item, list | tuple):
        return list(item), {}
    return [item], {}


def enqueue_many(
    func: Callable[..., Any] | str, params: Iterable[Any], **options: Any
) -> list[Handle]:
    """Enqueue one job per item of ``params`` in one transaction, all or nothing.

    An item that is a dict gives keyword arguments, a list or tuple positional arguments,
    anything else the single argument. With ``id="x"`` the jobs get ids ``x-0``, ``x-1``, ...
    """
    path, _target_func, defaults = _target(func)
    template = defaults.merge(options).template(path)
    now = timezone.now()
    rows = []
    for index, item in enumerate(params):
        args, kwargs = _item_call(item)
        check_json(f"arguments (item {index})", args)
        check_json(f"keyword arguments (item {index})", kwargs)
        # Apart by a microsecond each, so that the items' order is their arrival order.
        enqueued_at = now + timedelta(microseconds=index)
        job_id = None if template.id is None else f"{template.id}-{index}"
        rows.append(template.job(args, kwargs, template.stamp(enqueued_at, job_id)))
    if not rows:
        return []
    # The same read-only check as one enqueue: the loop reserves each job's cost when it
    # could start, so a batch is refused exactly when its first job would be.
    check_reservation_room(template.queue, template.cost)
    with transaction.atomic():
        check_enqueue_rate(len(rows))
        if template.id is None:
            insert_rows(Job, rows)
        else:
            if not template.ignore_duplicates:
                taken = Job.objects.filter(id__in=[r.id for r in rows]).values_list(
                    "id", flat=True
                )
                first = next(iter(taken), None)
                if first is not None:
                    raise DuplicateJobId(first)
            Job.objects.bulk_create(rows, batch_size=1000, ignore_conflicts=True)
    transaction.on_commit(_wake_up(rows[0].start_at, now), robust=True)
    return [Handle(r.id, owner=r.owner) for r in rows]


__all__ = ["JobFunction", "JobOptions", "enqueue", "enqueue_many", "job"]

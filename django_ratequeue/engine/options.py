"""What an enqueue asks for: its options, checked once per function into a template.

:class:`JobOptions` merges a call's options over a function's defaults and validates
them, before anything is written, into a :class:`JobTemplate` that knows the job row's
columns and its prepared INSERT (:class:`.bulk.RowInsert`). The enqueue rate limit and
the rate-gated queues' room are checked by :mod:`.admission`. docs/api.md lists the options.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Literal, NamedTuple, Protocol, Required, TypedDict

from django_ratequeue.conf import RateQueueSettings, ratequeue_settings
from django_ratequeue.engine.bounds import (
    MAX_INT,
    MIN_INT,
    check_json,
    check_text,
    integer,
)
from django_ratequeue.engine.bulk import RowCopy, RowInsert
from django_ratequeue.engine.models import Job, Status, new_job_id, queue_connection
from django_ratequeue.engine.optionvalues import (
    QueueChoice,
    callback_path,
    concurrency_key,
    custom_id,
    owner_of,
    retry_of,
    start_of,
    timeout_of,
)
from django_ratequeue.engine.retry import Retry
from django_ratequeue.engine.subtasks import current_job_id
from django_ratequeue.engine.wakeup import LOOP, notify_clause
from django_ratequeue.tracing import current_traceparent


class QueueSpec(TypedDict, total=False):
    """A queue named with the limit it gets: ``queue={"name": "llm", "max_concurrency": 4}``."""

    name: Required[str]
    max_concurrency: int


class RetryOptions(TypedDict, total=False):
    """The fields of :class:`.retry.Retry`, as a dict for the ``retries`` option."""

    retry_count: int
    initial_interval: float
    max_interval: float
    backoff_factor: float
    randomize_interval: bool


class EnqueueOptions(TypedDict, total=False):
    """The options of a job, as ``@job``, ``.using()`` and the enqueue functions take them.

    Those are ``enqueue()`` and ``enqueue_many()`` (see docs/api.md); a name that is not
    one of these is a ValueError."""

    queue: str | QueueSpec | None
    concurrency_key: str
    start_at: datetime | str | None
    run_after: timedelta | float | None
    retries: int | RetryOptions | Retry | None
    id: str | None
    on_duplicate_id: Literal["error", "ignore"]
    priority: int
    timeout: timedelta | float | None
    on_complete: Callable[..., Any] | str | None
    context: Any
    owner: Any
    cost: int
    unique_for: timedelta | float | None
    debounce: timedelta | float | None
    unique_key: str | None


OPTION_NAMES = frozenset(EnqueueOptions.__optional_keys__)
# Merged options kept per JobOptions (see JobOptions.merge).
MERGES_KEPT = 1000


class JobStamp(NamedTuple):
    """The columns of a new job that neither its options nor its arguments decide."""

    id: str
    status: Status
    start_at: datetime
    created_at: datetime
    parent_id: str
    batch_id: str = ""
    # The W3C trace context the job was enqueued in (docs/tracing.md), "" without one.
    traceparent: str = ""


# What differs from job to job of one template, in the order JobTemplate.insert sends it.
PER_JOB_COLUMNS = ("args", "kwargs", *JobStamp._fields)


class Hold(Protocol):
    """What a plug-in's enqueue option asks of the jobs an enqueue writes (hooks.py)."""

    @property
    def delay(self) -> timedelta | None:
        """Return how long after its enqueue the job starts, if the option decides it."""

    def hold(
        self, template: JobTemplate, args: list[Any], kwargs: dict[str, Any], stamp: JobStamp
    ) -> str | None:
        """Return the id of the job that answers the call instead, or None to write it."""


# A plug-in's check of the options: what they ask of it (None: nothing), or ValueError.
OptionCheck = Callable[[Mapping[str, Any]], Hold | None]
# A plug-in's column of a new job, read from the context it is enqueued in.
ContextColumn = Callable[[], str]

_option_checks: dict[str, OptionCheck] = {}
# column -> (the plug-in that stamps it, how); and each as (its place in a JobStamp, how).
_context_columns: dict[str, tuple[str, ContextColumn]] = {}
_context_slots: list[tuple[int, ContextColumn]] = []


def add_option_check(plugin: str, check: OptionCheck) -> None:
    """Declare ``plugin``'s check of every enqueue's options (declaring again replaces it)."""
    _option_checks[plugin] = check


def add_context_column(plugin: str, column: str, read: ContextColumn) -> None:
    """Declare that ``plugin`` stamps ``column`` of each new job with ``read()`` at enqueue."""
    if column not in JobStamp._fields:
        raise LookupError(f"{column!r} is not one of a new job's stamped columns.")
    _context_columns[column] = (plugin, read)
    _context_slots[:] = [(JobStamp._fields.index(c), r) for c, (_, r) in _context_columns.items()]


@dataclass(frozen=True)
class JobTemplate:
    """What a job's options decide, checked once.

    A job is a template plus its arguments, an id and the time it was enqueued.
    ``start_at`` is fixed, ``run_after`` counts from the enqueue."""

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
    # The length of the context's JSON, which counts towards MAX_ARGUMENTS_BYTES.
    context_size: int
    # What the plug-ins' options ask of each job (add_option_check), in PLUGINS' order.
    holds: tuple[Hold, ...] = ()

    def check_size(self, args: str, kwargs: str, what: str = "") -> None:
        """Refuse arguments (JSON text) that with the context exceed MAX_ARGUMENTS_BYTES.

        Rows that big would slow every read of the queue's tables."""
        limit = ratequeue_settings().MAX_ARGUMENTS_BYTES
        size = len(args) + len(kwargs) + self.context_size
        if size > limit:
            raise ValueError(
                f"The job's arguments{what} and context are {size} bytes of JSON; the most "
                f'is RATEQUEUE["MAX_ARGUMENTS_BYTES"] ({limit}). Pass a reference instead, '
                "such as the id of a row or the name of a file."
            )

    def __post_init__(self) -> None:
        """Refuse what no database column could store as given, on every database alike."""
        for name in ("queue", "concurrency_key", "owner", "id"):
            check_text(name, getattr(self, name) or "")

    @cached_property
    def columns(self) -> dict[str, Any]:
        """The job's columns that every job of this template shares.

        That is what the options decide, and the model's defaults for the rest (no
        attempts yet, no result...)."""
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
    def row_copy(self) -> RowCopy:
        return RowCopy(Job, self.columns, PER_JOB_COLUMNS)

    @cached_property
    def row_insert(self) -> RowInsert:
        return RowInsert(Job, self.columns, PER_JOB_COLUMNS, returning=notify_clause(LOOP))

    def stamp(self, now: datetime, job_id: str | None = None) -> JobStamp:
        """Return the id, status and times of a job enqueued ``now``."""
        start_at = self.start_at or (now + self.run_after if self.run_after else now)
        status = Status.SCHEDULED if start_at > now else Status.WAITING
        # In JobStamp's order; the plug-ins' context columns ("" by default) filled in.
        values = [
            job_id or self.id or new_job_id(),
            status,
            start_at,
            now,
            current_job_id(),
            "",
            current_traceparent(),
        ]
        for index, read in _context_slots:
            values[index] = read()
        return JobStamp._make(values)

    def job(self, args: list[Any], kwargs: dict[str, Any], stamp: JobStamp) -> Job:
        """Return an unsaved Job."""
        return Job(**self.columns, args=args, kwargs=kwargs, **stamp._asdict())

    def insert(self, args: str, kwargs: str, stamp: JobStamp, async_commit: bool) -> bool:
        """INSERT a job whose arguments are given as JSON text, without building a Job.

        A job with the caller's id is not inserted when the id is taken: return whether
        it was."""
        adapt = queue_connection().ops.adapt_datetimefield_value
        return self.row_insert.execute(
            (
                args,
                kwargs,
                stamp.id,
                stamp.status,
                adapt(stamp.start_at),
                adapt(stamp.created_at),
                stamp.parent_id,
                stamp.batch_id,
                stamp.traceparent,
            ),
            async_commit,
            skip_taken=self.id is not None,
        )


@dataclass(frozen=True)
class JobOptions:
    """Merge and validate the enqueue options.

    ``merge`` applies a call's options over defaults, ``template`` validates them for
    one function."""

    values: Mapping[str, Any] = field(default_factory=dict)
    # path -> (the settings it was checked under, its template)
    _templates: dict[str, tuple[RateQueueSettings, JobTemplate]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The JSON of options merged over these -> the result, so that the same call's options
    # (the HTTP API's owner, say) are checked once, not at every enqueue.
    _merged: dict[str, JobOptions] = field(
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
        if not other:
            return self
        try:
            key = json.dumps(other, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError, RecursionError):  # a callable...: checked each time
            return JobOptions({**self.values, **other})
        merged = self._merged.get(key)
        if merged is None:
            if len(self._merged) >= MERGES_KEPT:
                self._merged.clear()
            merged = self._merged[key] = JobOptions({**self.values, **other})
        return merged

    def template(self, path: str) -> JobTemplate:
        """Return the options checked for the function at ``path``, or raise ValueError.

        The error names what to fix. The template is kept while the settings stay the
        same: a function's own options (``@job``) are checked once, not at every
        enqueue."""
        settings = ratequeue_settings()
        known = self._templates.get(path)
        if known is not None and known[0] is settings:
            return known[1]
        template = self._check(path)
        self._templates[path] = (settings, template)
        return template

    def _check(self, path: str) -> JobTemplate:
        """Check every option, in a fixed order, and return the template they make."""
        options = self.values
        queue = QueueChoice.coerce(options.get("queue"))
        key = concurrency_key(options.get("concurrency_key") or "")
        start_at, run_after = start_of(options.get("start_at"), options.get("run_after"))
        retry = retry_of(options.get("retries"))
        priority = integer("priority", options.get("priority", 0), MIN_INT, MAX_INT)
        timeout = timeout_of(options.get("timeout"))
        on_complete_path = callback_path(options.get("on_complete"))
        context = options.get("context")
        context_size = len(check_json("context", context))
        cost = integer("cost", options.get("cost", 1), 0, MAX_INT)
        owner = owner_of(options.get("owner"))
        on_duplicate_id = options.get("on_duplicate_id", "error")
        job_id, ignore_duplicates = custom_id(options.get("id"), on_duplicate_id)
        holds = tuple(hold for check in _option_checks.values() if (hold := check(options)))
        for hold in holds:
            run_after = run_after if hold.delay is None else hold.delay
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
            owner=owner,
            cost=cost,
            id=job_id,
            ignore_duplicates=ignore_duplicates,
            context_size=context_size,
            holds=holds,
        )

"""The rules of the ``RATEQUEUE`` settings, each written once, in one parser."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from django_ratequeue import check_ids as ids
from django_ratequeue.conf.queues import parse_queues
from django_ratequeue.conf.ratelimits import (
    parse_api_throttles,
    parse_enqueue_rate_limit,
    parse_rate_limits,
)
from django_ratequeue.conf.values import (
    CLOCKS,
    DEFAULTS,
    Problem,
    RateQueueSettings,
)
from django_ratequeue.engine.bounds import MAX_DELAY, MAX_INT, integer, seconds
from django_ratequeue.engine.retry import Retry

POSITIVE_INTEGERS = (
    "MAX_CONCURRENCY",
    "MAX_QUEUE_CONCURRENCY",
    "MAX_ARGUMENTS_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ERROR_BYTES",
    "MAX_PROGRESS_BYTES",
    "MAX_OUTPUT_CHUNK_LENGTH",
    "MAX_OUTPUT_LENGTH",
    "API_MAX_BODY_BYTES",
    "API_MAX_BULK_ITEMS",
    "API_MAX_STREAMS_PER_USER",
    "API_MAX_STREAMS_PER_ADDRESS",
    "API_WSGI_THREADS",
    "API_MAX_WAITING_CLAIMS_PER_KEY",
)
# The most slots a worker process may have: each may hold a thread and a connection.
MAX_SLOTS = 1000
DURATIONS = (
    "SEGMENT",
    "LOOP_LEASE",
    "WATCHDOG_INTERVAL",
    "HEARTBEAT_INTERVAL",
    "WORKER_DEAD_AFTER",
    "POLL_INTERVAL",
    "STOP_GRACE",
    "REMOTE_LEASE",
    "PROGRESS_INTERVAL",
    "UNKNOWN_JOB_PATIENCE",
)
# Settings that no longer exist, and why: their presence is an error that says so.
REMOVED = {
    "DISPATCH_BATCH_SIZE": "runners claim attempts themselves; there are no batches to size.",
    "RUNNER_IDLE": "each worker process runs a runner for its whole life (SLOTS at once).",
    "RUNNER_TURN": "each worker process runs a runner for its whole life (SLOTS at once).",
}
FLAGS = {
    "RATE_LIMIT_ASYNC_COMMIT": ids.RATE_LIMIT_ASYNC_COMMIT,
    "ENQUEUE_ASYNC_COMMIT": ids.ENQUEUE_ASYNC_COMMIT,
    "API_ALLOW_ANONYMOUS": ids.API_ALLOW_ANONYMOUS,
    "DJANGO_Q_ADMIN": ids.DJANGO_Q_ADMIN,
}


@dataclass
class _Parser:
    """Read the merged dict value by value, keeping every problem it finds."""

    values: Mapping[str, Any]
    problems: list[Problem] = field(default_factory=list)

    def problem(self, check_id: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(check_id, message, hint))

    def positive_integer(self, name: str) -> int:
        """Return the setting ``name`` if it is a positive integer, else 0 (never valid)."""
        try:
            return integer(f'RATEQUEUE["{name}"]', self.values[name], 1, MAX_INT)
        except ValueError as error:
            self.problem(ids.POSITIVE_INTEGER, str(error), "e.g. 10")
            return 0

    def slots(self) -> int:
        """Return how many attempts one worker process runs at once, or 0 (never valid)."""
        try:
            return integer('RATEQUEUE["SLOTS"]', self.values["SLOTS"], 1, MAX_SLOTS)
        except ValueError as error:
            self.problem(
                ids.SLOTS,
                str(error),
                "8 suits IO-bound jobs (network calls); 1 suits CPU-bound ones.",
            )
            return 0

    def duration(self, name: str, check_id: str, *, allow_zero: bool) -> float:
        """Return the setting ``name`` in finite seconds, or -1 (never valid).

        A timedelta is taken too."""
        try:
            return seconds(
                f'RATEQUEUE["{name}"]', self.values[name], MAX_DELAY, allow_zero=allow_zero
            )
        except ValueError as error:
            self.problem(check_id, str(error))
            return -1.0

    def failed_retention(self, retention: float) -> float:
        """Return FAILED_RETENTION in seconds: ``retention`` (RETENTION's) when it is None."""
        if self.values["FAILED_RETENTION"] is None:
            return retention
        return self.duration("FAILED_RETENTION", ids.FAILED_RETENTION, allow_zero=True)

    def stream_share(self) -> float:
        """Return API_STREAM_SHARE, a share of a process's threads above 0 and at most 1."""
        value = self.values["API_STREAM_SHARE"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            self.problem(
                ids.API_STREAM_SHARE,
                f'RATEQUEUE["API_STREAM_SHARE"] must be a number above 0 and at most 1, '
                f"got {value!r}.",
                "0.5: event streams hold at most half of each WSGI process's threads.",
            )
            return 0.0
        return float(value)

    def flag(self, name: str) -> bool:
        value = self.values[name]
        if not isinstance(value, bool):
            self.problem(FLAGS[name], f'RATEQUEUE["{name}"] must be True or False, got {value!r}.')
        return bool(value)

    def default_retries(self) -> Retry:
        try:
            return Retry.coerce(self.values["DEFAULT_RETRIES"])
        except (ValueError, TypeError) as error:
            self.problem(ids.DEFAULT_RETRIES, f'RATEQUEUE["DEFAULT_RETRIES"] is invalid: {error}')
            return Retry()

    def job_modules(self) -> tuple[str, ...]:
        value = self.values["JOB_MODULES"]
        if isinstance(value, list | tuple) and all(
            isinstance(name, str) and name for name in value
        ):
            return tuple(value)
        self.problem(
            ids.JOB_MODULES,
            'RATEQUEUE["JOB_MODULES"] must be a list of module names, imported at start-up '
            "so that the jobs they define are registered.",
            'e.g. ["myproject.jobs"]; installed apps\' jobs.py are found without it.',
        )
        return ()

    def limited_view(self) -> str | Callable[..., Any] | None:
        value = self.values["RATE_LIMITED_VIEW"]
        if value is None or callable(value) or (isinstance(value, str) and value):
            return value
        self.problem(
            ids.RATE_LIMITED_VIEW,
            'RATEQUEUE["RATE_LIMITED_VIEW"] must be None, a view or its dotted path, '
            f"got {value!r}.",
            'e.g. "myproject.views.too_many_requests"',
        )
        return None

    def clock(self) -> str:
        value = self.values["CLOCK"]
        if value not in CLOCKS:
            self.problem(
                ids.CLOCK,
                f'RATEQUEUE["CLOCK"] must be "database" or "local", got {value!r}.',
                '"local" (this process\'s clock) is for tests that move time; keep the '
                "default on hosts that share a database.",
            )
            return "database"
        return str(value)

    def parse(self) -> RateQueueSettings:
        """Return the settings; they are meaningful only when no problem was found."""
        numbers = {name: self.positive_integer(name) for name in POSITIVE_INTEGERS}
        durations = {
            name: self.duration(name, ids.DURATION, allow_zero=False) for name in DURATIONS
        }
        if min(durations.values()) > 0:
            if durations["WORKER_DEAD_AFTER"] <= durations["HEARTBEAT_INTERVAL"]:
                self.problem(
                    ids.WORKER_DEAD_AFTER,
                    'RATEQUEUE["WORKER_DEAD_AFTER"] must be longer than HEARTBEAT_INTERVAL, '
                    "or live workers would be declared dead.",
                    "Use several heartbeat intervals.",
                )
            if durations["LOOP_LEASE"] <= durations["WATCHDOG_INTERVAL"]:
                self.problem(
                    ids.LOOP_LEASE,
                    'RATEQUEUE["LOOP_LEASE"] must be longer than WATCHDOG_INTERVAL.',
                )
        rate_limits, public_rate_limits = parse_rate_limits(
            self.values["RATE_LIMITS"], self.problem
        )
        retention = self.duration("RETENTION", ids.RETENTION, allow_zero=True)
        limits_given = isinstance(self.values["RATE_LIMITS"], Mapping)
        return RateQueueSettings(
            QUEUES=MappingProxyType(
                parse_queues(
                    self.values["QUEUES"],
                    self.problem,
                    numbers["MAX_QUEUE_CONCURRENCY"] or None,
                    self.values["RATE_LIMITS"] if limits_given else {},
                )
            ),
            RATE_LIMITS=MappingProxyType(rate_limits),
            PUBLIC_RATE_LIMITS=MappingProxyType(public_rate_limits),
            RATE_LIMIT_ASYNC_COMMIT=self.flag("RATE_LIMIT_ASYNC_COMMIT"),
            RATE_LIMITED_VIEW=self.limited_view(),
            JOB_MODULES=self.job_modules(),
            SCHEDULES=self.values["SCHEDULES"],
            DEFAULT_RETRIES=self.default_retries(),
            ENQUEUE_RATE_LIMIT=parse_enqueue_rate_limit(
                self.values["ENQUEUE_RATE_LIMIT"], self.problem
            ),
            ENQUEUE_ASYNC_COMMIT=self.flag("ENQUEUE_ASYNC_COMMIT"),
            RETENTION=retention,
            FAILED_RETENTION=self.failed_retention(retention),
            ROLLUP_RETENTION=self.duration(
                "ROLLUP_RETENTION", ids.ROLLUP_RETENTION, allow_zero=True
            ),
            SEGMENT=durations["SEGMENT"],
            LOOP_LEASE=durations["LOOP_LEASE"],
            WATCHDOG_INTERVAL=durations["WATCHDOG_INTERVAL"],
            HEARTBEAT_INTERVAL=durations["HEARTBEAT_INTERVAL"],
            WORKER_DEAD_AFTER=durations["WORKER_DEAD_AFTER"],
            POLL_INTERVAL=durations["POLL_INTERVAL"],
            STOP_GRACE=durations["STOP_GRACE"],
            REMOTE_LEASE=durations["REMOTE_LEASE"],
            UNKNOWN_JOB_PATIENCE=durations["UNKNOWN_JOB_PATIENCE"],
            MAX_CONCURRENCY=numbers["MAX_CONCURRENCY"],
            SLOTS=self.slots(),
            MAX_QUEUE_CONCURRENCY=numbers["MAX_QUEUE_CONCURRENCY"],
            MAX_ARGUMENTS_BYTES=numbers["MAX_ARGUMENTS_BYTES"],
            MAX_RESULT_BYTES=numbers["MAX_RESULT_BYTES"],
            MAX_ERROR_BYTES=numbers["MAX_ERROR_BYTES"],
            PROGRESS_INTERVAL=durations["PROGRESS_INTERVAL"],
            MAX_PROGRESS_BYTES=numbers["MAX_PROGRESS_BYTES"],
            MAX_OUTPUT_CHUNK_LENGTH=numbers["MAX_OUTPUT_CHUNK_LENGTH"],
            MAX_OUTPUT_LENGTH=numbers["MAX_OUTPUT_LENGTH"],
            API_ALLOW_ANONYMOUS=self.flag("API_ALLOW_ANONYMOUS"),
            API_MAX_BODY_BYTES=numbers["API_MAX_BODY_BYTES"],
            API_MAX_BULK_ITEMS=numbers["API_MAX_BULK_ITEMS"],
            API_THROTTLES=MappingProxyType(
                parse_api_throttles(self.values["API_THROTTLES"], self.problem)
            ),
            API_MAX_STREAMS_PER_USER=numbers["API_MAX_STREAMS_PER_USER"],
            API_MAX_WAITING_CLAIMS_PER_KEY=numbers["API_MAX_WAITING_CLAIMS_PER_KEY"],
            API_MAX_STREAMS_PER_ADDRESS=numbers["API_MAX_STREAMS_PER_ADDRESS"],
            API_WSGI_THREADS=numbers["API_WSGI_THREADS"],
            API_STREAM_SHARE=self.stream_share(),
            CLOCK=self.clock(),
            DJANGO_Q_ADMIN=self.flag("DJANGO_Q_ADMIN"),
        )


def nearest_known(name: str) -> str:
    """Return ``name``, with the known setting it likely misspells, if any."""
    near = difflib.get_close_matches(name.upper(), DEFAULTS, n=1, cutoff=0.75)
    return f"{name} (did you mean {near[0]}?)" if near else name


def merged(configured: Any) -> dict[str, Any] | None:
    """Return ``configured`` (``settings.RATEQUEUE``) over the defaults, unchecked.

    None when it is neither None nor a dict."""
    configured = configured or {}
    if not isinstance(configured, Mapping):
        return None
    return {**DEFAULTS, **configured}


def parse_settings(configured: Any) -> tuple[RateQueueSettings | None, list[Problem]]:
    """Return the settings ``configured`` gives over the defaults, and their problems.

    ``configured`` is ``settings.RATEQUEUE``. The settings are None when there is any
    problem."""
    values = merged(configured)
    if values is None:
        message = f"settings.RATEQUEUE must be a dict, got {configured!r}."
        return None, [Problem(ids.SETTINGS_NOT_A_DICT, message)]
    configured = configured or {}
    parser = _Parser(values)
    for name in sorted(set(configured) & set(REMOVED)):
        parser.problem(ids.UNKNOWN_SETTING, f'RATEQUEUE["{name}"] was removed: {REMOVED[name]}')
    unknown = sorted(map(str, set(configured) - set(DEFAULTS) - set(REMOVED)))
    if unknown:
        parser.problem(
            ids.UNKNOWN_SETTING,
            f"Unknown RATEQUEUE setting(s): {', '.join(map(nearest_known, unknown))}.",
            f"Known settings: {', '.join(sorted(DEFAULTS))}.",
        )
    parsed = parser.parse()
    return (None if parser.problems else parsed), parser.problems

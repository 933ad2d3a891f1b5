"""The ``RATEQUEUE`` settings, merged over their defaults, checked and typed.

Read them through :func:`ratequeue_settings`: one typed attribute per setting, built again
when ``override_settings`` changes ``RATEQUEUE``. Every rule is written once, in
:func:`parse_settings`: the system checks report its problems at start-up, and reading
settings that break one raises :class:`~django.core.exceptions.ImproperlyConfigured`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from types import MappingProxyType
from typing import Any, NamedTuple

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from . import check_ids as ids
from .queue.bounds import (
    MAX_DELAY,
    MAX_INT,
    check_queue_concurrency,
    check_queue_name,
    integer,
    seconds,
)
from .queue.retry import Retry
from .ratelimit.config import RateLimitConfig, check_limit_name, parse_config

# What each setting means and what it becomes when read: RateQueueSettings below.
DEFAULTS: dict[str, Any] = {
    "MAX_CONCURRENCY": 10,
    "SLOTS": 8,
    "MAX_QUEUE_CONCURRENCY": 100,
    "QUEUES": {},
    "RATE_LIMITS": {},
    "RATE_LIMIT_ASYNC_COMMIT": True,
    "RATE_LIMITED_VIEW": None,
    "JOB_MODULES": [],
    "DEFAULT_RETRIES": 6,
    "ENQUEUE_RATE_LIMIT": None,
    "ENQUEUE_ASYNC_COMMIT": False,
    "RETENTION": 7 * 24 * 3600,
    "ROLLUP_RETENTION": 7 * 24 * 3600,
    "SEGMENT": 0.1,
    "LOOP_LEASE": 10.0,
    "WATCHDOG_INTERVAL": 0.5,
    "HEARTBEAT_INTERVAL": 2.0,
    "WORKER_DEAD_AFTER": 10.0,
    "POLL_INTERVAL": 0.05,
    "STOP_GRACE": 3.0,
    "REMOTE_LEASE": 30.0,
    "MAX_ARGUMENTS_BYTES": 1024 * 1024,
    "MAX_RESULT_BYTES": 1024 * 1024,
    "MAX_ERROR_BYTES": 64 * 1024,
    "PROGRESS_INTERVAL": 0.05,
    "MAX_PROGRESS_BYTES": 64 * 1024,
    "MAX_OUTPUT_CHUNK_LENGTH": 64 * 1024,
    "MAX_OUTPUT_LENGTH": 1024 * 1024,
    "API_ALLOW_ANONYMOUS": False,
    "API_MAX_BODY_BYTES": 2 * 1024 * 1024,
    "API_MAX_BULK_ITEMS": 1000,
    "API_THROTTLES": {
        "enqueue": {"rate": 100, "period": 60, "capacity": 1000},
        "read": {"rate": 600, "period": 60, "capacity": 600},
    },
    "API_MAX_STREAMS_PER_USER": 4,
    "API_MAX_WAITING_CLAIMS_PER_KEY": 8,
    "CLOCK": "database",
}
# The clocks the app can read (CLOCK): the database server's, or this process's own.
CLOCKS = ("database", "local")


@dataclass(frozen=True)
class QueueConfig:
    """One entry of ``QUEUES``; runtime changes override it (see queue/control.py)."""

    # Jobs of the queue running at once (0 pauses it), at most MAX_QUEUE_CONCURRENCY. Each
    # concurrency_key is its own copy of the queue, with this limit.
    max_concurrency: int = 1
    # Jobs running at once across all the queue's concurrency keys; None: no cap.
    total_concurrency: int | None = None
    # A RATE_LIMITS name: each job reserves its cost and starts when the reservation says.
    rate_limit: str | None = None
    paused: bool = False
    # Served only by remote workers, which claim its attempts over HTTP
    # (docs/remote-workers.md); the cluster's runners never take them.
    remote: bool = False


# The key of a public rate limit for a request: None (one value for everybody), a
# shorthand of decorators.py's, or a callable (request) -> str | None.
KeyRule = str | Callable[[Any], str | None] | None
PUBLIC_KEYS = ("user", "user_or_ip", "ip")


@dataclass(frozen=True)
class PublicRateLimit:
    key: KeyRule


@dataclass(frozen=True)
class RateQueueSettings:
    """The settings as the app reads them: each value checked and of its type."""

    # Jobs running at once across the whole environment.
    MAX_CONCURRENCY: int
    # Attempts one worker process runs at once.
    SLOTS: int
    # Upper bound for any queue's max_concurrency.
    MAX_QUEUE_CONCURRENCY: int
    # Queue name -> its configuration (read-only).
    QUEUES: Mapping[str, QueueConfig]
    # Limit name -> its configuration, parsed from the dict form (read-only).
    RATE_LIMITS: Mapping[str, RateLimitConfig]
    # The limits whose entry says "public": True (the HTTP API shows their value to each
    # user): name -> the rule that gives a request's key ("key" in the entry).
    PUBLIC_RATE_LIMITS: Mapping[str, KeyRule]
    # A consume that is its own transaction on PostgreSQL commits without waiting for the
    # WAL flush (synchronous_commit off for it alone): about twice the decisions per
    # second, but a PostgreSQL crash may forget the consumes of its last fraction of a
    # second. Never applies inside a caller's transaction.
    RATE_LIMIT_ASYNC_COMMIT: bool
    # A view (request, RateLimited) -> HttpResponse, or its dotted path, for @ratelimit
    # refusals; None answers with a plain-text 429.
    RATE_LIMITED_VIEW: str | Callable[..., Any] | None
    # Modules imported at start-up (in web processes and qcluster workers alike) for the
    # jobs they register, besides each installed app's jobs.py: only registered jobs run.
    JOB_MODULES: tuple[str, ...]
    # Retries of a job that sets none (the setting: an int, or a dict of Retry fields).
    DEFAULT_RETRIES: Retry
    # A leaky bucket on enqueues (the setting: e.g. {"rate": 200, "period": 1,
    # "capacity": 600}, a token bucket unless it names another kind); None is off.
    ENQUEUE_RATE_LIMIT: RateLimitConfig | None
    # Like RATE_LIMIT_ASYNC_COMMIT for an enqueue that is its own transaction: more
    # enqueues per second, but a PostgreSQL crash may forget jobs whose caller already got
    # a handle.
    ENQUEUE_ASYNC_COMMIT: bool
    # How long finished jobs are kept for result() and the admin, in seconds.
    RETENTION: float
    # How long the queues' per-minute figures (queue/rollups.py) are kept, in seconds.
    ROLLUP_RETENTION: float
    # Main loop timing, in seconds. SEGMENT: the loop's time slice (wake-ups are rounded
    # up to it; runners report completions at most this often).
    SEGMENT: float
    LOOP_LEASE: float
    WATCHDOG_INTERVAL: float
    HEARTBEAT_INTERVAL: float
    WORKER_DEAD_AFTER: float
    # How often a waiter looks for work where the database sends no signals (SQLite).
    POLL_INTERVAL: float
    # A runner hands its django-q2 worker back after this long without work, and after
    # its turn in any case (the loop asks for a new one when there is work).
    # Seconds a stopping worker process gives the jobs in its slots before handing back.
    STOP_GRACE: float
    # A remote worker's claim holds its attempt this long; each heartbeat extends it by as
    # much. An attempt whose lease lapses is lost, and retried by its policy.
    REMOTE_LEASE: float
    # Caps on what a job's row holds, in bytes: the JSON of its arguments and context
    # together (bigger: ValueError at enqueue), of its result (bigger: the attempt fails),
    # and the text of an error message or a traceback (each cut to this size).
    MAX_ARGUMENTS_BYTES: int
    MAX_RESULT_BYTES: int
    MAX_ERROR_BYTES: int
    # A running job's progress and output are written at most once per PROGRESS_INTERVAL
    # seconds (queue/progress.py); the JSON of its progress is at most MAX_PROGRESS_BYTES,
    # one stream_output() at most MAX_OUTPUT_CHUNK_LENGTH characters, and the output of
    # all its attempts together at most MAX_OUTPUT_LENGTH.
    PROGRESS_INTERVAL: float
    MAX_PROGRESS_BYTES: int
    MAX_OUTPUT_CHUNK_LENGTH: int
    MAX_OUTPUT_LENGTH: int
    # The HTTP API (django_ratequeue.urls): whether visitors who are not logged in may use
    # it (their session owns their jobs), the largest request body, and the most jobs one
    # bulk enqueue may hold.
    API_ALLOW_ANONYMOUS: bool
    API_MAX_BODY_BYTES: int
    API_MAX_BULK_ITEMS: int
    # Per-user throttles of the HTTP API (token buckets, per user or per client address):
    # "enqueue" draws a token per job enqueued (a bulk one per item), "read" one per
    # other request; None turns one off. A throttle scope ratequeue_enqueue or
    # ratequeue_read in RATE_LIMITS or DRF's DEFAULT_THROTTLE_RATES replaces it.
    API_THROTTLES: Mapping[str, RateLimitConfig | None]
    # Event streams open at once per user, and claims waiting for work at once per worker
    # key, across all processes: each holds a server thread under WSGI (429 beyond).
    API_MAX_STREAMS_PER_USER: int
    API_MAX_WAITING_CLAIMS_PER_KEY: int
    # Whose clock every time the app writes or compares comes from (clock.py): "database",
    # the database server's, shared by all hosts; or "local", this process's own, which
    # tests move with time-machine or freezegun (one host only: docs/testing.md).
    CLOCK: str


class Problem(NamedTuple):
    """What is wrong with a setting: a system check's id, message and hint."""

    id: str
    message: str
    hint: str = ""


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
}
QUEUE_OPTIONS = {f.name for f in fields(QueueConfig)}
RATE_LIMITS_EXAMPLE = '{"login": {"kind": "token bucket", "rate": 10, "period": 3600}}'
QUEUES_EXAMPLE = '{"emails": {"max_concurrency": 2}}'
ENQUEUE_RATE_LIMIT_EXAMPLE = '{"rate": 200, "period": 1, "capacity": 600}'
API_THROTTLE_SCOPES = ("enqueue", "read")
API_THROTTLES_EXAMPLE = '{"enqueue": {"rate": 100, "period": 60, "capacity": 1000}, "read": None}'


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

    def flag(self, name: str) -> bool:
        value = self.values[name]
        if not isinstance(value, bool):
            self.problem(FLAGS[name], f'RATEQUEUE["{name}"] must be True or False, got {value!r}.')
        return bool(value)

    def rate_limits(self) -> tuple[dict[str, RateLimitConfig], dict[str, KeyRule]]:
        """Return the limits, and the key rule of each public one."""
        limits = self.values["RATE_LIMITS"]
        hint = f'For example RATEQUEUE["RATE_LIMITS"] = {RATE_LIMITS_EXAMPLE}.'
        if not isinstance(limits, Mapping):
            self.problem(
                ids.RATE_LIMITS_NOT_A_DICT,
                f'RATEQUEUE["RATE_LIMITS"] must be a dict of name -> config, got {limits!r}.',
                hint,
            )
            return {}, {}
        parsed: dict[str, RateLimitConfig] = {}
        public: dict[str, KeyRule] = {}
        for name, config in limits.items():
            try:
                check_limit_name(name)
            except ValueError as error:
                self.problem(
                    ids.RATE_LIMIT_NAME, f'RATEQUEUE["RATE_LIMITS"] has an invalid name: {error}'
                )
                continue
            if isinstance(config, Mapping) and {"public", "key"} & set(config):
                config = dict(config)
                exposure = self.public_limit(name, config.pop("public", False), config)
                config.pop("key", None)
                if exposure is not None:
                    public[name] = exposure.key
            try:
                parsed[name] = parse_config(config)
            except ValueError as error:
                self.problem(
                    ids.RATE_LIMIT_CONFIG,
                    f'RATEQUEUE["RATE_LIMITS"][{name!r}] is invalid: {error}',
                    hint,
                )
        return parsed, public

    def public_limit(
        self, name: str, public: Any, config: Mapping[str, Any]
    ) -> PublicRateLimit | None:
        """Return the limit ``name`` as the HTTP API shows it, or None if it is not public.

        A public limit has ``"public": True``, and the rule that gives the key of the
        requesting user (``"key"``, "user" when not given)."""
        where = f'RATEQUEUE["RATE_LIMITS"][{name!r}]'
        if not isinstance(public, bool):
            self.problem(
                ids.RATE_LIMIT_PUBLIC, f"{where}['public'] must be True or False, got {public!r}."
            )
            return None
        if not public:
            if "key" in config:
                self.problem(
                    ids.RATE_LIMIT_PUBLIC,
                    f"{where}['key'] is the key rule of a public limit, but the limit is "
                    "not public.",
                    'Add "public": True, or remove "key" (give key= where it is consumed).',
                )
            return None
        key = config.get("key", "user")
        if not (key is None or callable(key) or key in PUBLIC_KEYS):
            self.problem(
                ids.RATE_LIMIT_PUBLIC,
                f"{where}['key'] must be None (one value for everybody), "
                f"{', '.join(map(repr, PUBLIC_KEYS))} or a callable (request) -> str, "
                f"got {key!r}.",
                "A header is not a key rule here: the client would choose its own key.",
            )
            return None
        return PublicRateLimit(key)

    def queues(self, ceiling: int | None, limits: Mapping[str, Any]) -> dict[str, QueueConfig]:
        queues = self.values["QUEUES"]
        if not isinstance(queues, Mapping):
            self.problem(
                ids.QUEUES_NOT_A_DICT,
                'RATEQUEUE["QUEUES"] must be a dict of name -> options.',
                QUEUES_EXAMPLE,
            )
            return {}
        parsed: dict[str, QueueConfig] = {}
        for name, options in queues.items():
            try:
                check_queue_name(name)
            except ValueError as error:
                self.problem(ids.QUEUE_NAME, f'RATEQUEUE["QUEUES"] has an invalid name: {error}')
                continue
            where = f'RATEQUEUE["QUEUES"][{name!r}]'
            if not isinstance(options, Mapping):
                self.problem(
                    ids.QUEUE_NOT_A_DICT, f"{where} must be a dict of options.", QUEUES_EXAMPLE
                )
                continue
            if "key_concurrency" in options:
                self.problem(
                    ids.QUEUE_KEY_CONCURRENCY,
                    f"{where}['key_concurrency'] is no longer an option: each concurrency "
                    "key is now its own copy of the queue, with the queue's max_concurrency.",
                    "Set max_concurrency to the jobs one key may run at once, and "
                    "total_concurrency to cap all keys together.",
                )
            unknown = sorted(map(str, set(options) - QUEUE_OPTIONS - {"key_concurrency"}))
            if unknown:
                known = ", ".join(sorted(QUEUE_OPTIONS))
                self.problem(
                    ids.QUEUE_UNKNOWN_OPTION,
                    f"{where} has unknown option(s) {', '.join(unknown)}.",
                    f"Known: {known}.",
                )
            config = QueueConfig(**{k: v for k, v in options.items() if k in QUEUE_OPTIONS})
            if ceiling is not None:
                try:
                    check_queue_concurrency(name, config.max_concurrency, ceiling)
                except ValueError as error:
                    self.problem(ids.QUEUE_MAX_CONCURRENCY, f"{where}: {error}", QUEUES_EXAMPLE)
            if config.total_concurrency is not None:
                try:
                    integer(
                        f"{where}['total_concurrency']",
                        config.total_concurrency,
                        1,
                        ceiling or MAX_INT,
                    )
                except ValueError as error:
                    self.problem(
                        ids.QUEUE_TOTAL_CONCURRENCY, str(error), "None (no cap) or e.g. 10"
                    )
            rate_limit = config.rate_limit
            if rate_limit is not None and (
                not isinstance(rate_limit, str) or rate_limit not in limits
            ):
                self.problem(
                    ids.QUEUE_RATE_LIMIT,
                    f"{where}['rate_limit'] names {rate_limit!r}, which is not in "
                    'RATEQUEUE["RATE_LIMITS"].',
                    "Define the limit there, or remove the option.",
                )
            if not isinstance(config.paused, bool):
                self.problem(ids.QUEUE_PAUSED, f"{where}['paused'] must be True or False.")
            if not isinstance(config.remote, bool):
                self.problem(
                    ids.QUEUE_REMOTE,
                    f"{where}['remote'] must be True or False.",
                    "True: only remote workers (docs/remote-workers.md) run its jobs.",
                )
            parsed[name] = config
        return parsed

    def default_retries(self) -> Retry:
        try:
            return Retry.coerce(self.values["DEFAULT_RETRIES"])
        except (ValueError, TypeError) as error:
            self.problem(ids.DEFAULT_RETRIES, f'RATEQUEUE["DEFAULT_RETRIES"] is invalid: {error}')
            return Retry()

    def enqueue_rate_limit(self) -> RateLimitConfig | None:
        value = self.values["ENQUEUE_RATE_LIMIT"]
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.problem(
                ids.ENQUEUE_RATE_LIMIT,
                'RATEQUEUE["ENQUEUE_RATE_LIMIT"] must be None or a dict.',
                ENQUEUE_RATE_LIMIT_EXAMPLE,
            )
            return None
        try:
            return parse_config({"kind": "token bucket", **value})
        except ValueError as error:
            self.problem(
                ids.ENQUEUE_RATE_LIMIT,
                f'RATEQUEUE["ENQUEUE_RATE_LIMIT"]: {error}',
                ENQUEUE_RATE_LIMIT_EXAMPLE,
            )
            return None

    def api_throttles(self) -> dict[str, RateLimitConfig | None]:
        """Return each scope's token bucket, or None (off)."""
        value = self.values["API_THROTTLES"]
        if not isinstance(value, Mapping) or set(value) - set(API_THROTTLE_SCOPES):
            self.problem(
                ids.API_THROTTLES,
                'RATEQUEUE["API_THROTTLES"] must be a dict of "enqueue" and "read", each a '
                f"rate limit or None, got {value!r}.",
                API_THROTTLES_EXAMPLE,
            )
            return {}
        parsed: dict[str, RateLimitConfig | None] = {}
        for scope in API_THROTTLE_SCOPES:
            config = value.get(scope)
            try:
                parsed[scope] = (
                    None if config is None else parse_config({"kind": "token bucket", **config})
                )
            except (TypeError, ValueError) as error:
                where = f'RATEQUEUE["API_THROTTLES"][{scope!r}]'
                self.problem(ids.API_THROTTLES, f"{where}: {error}", API_THROTTLES_EXAMPLE)
        return parsed

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
        rate_limits, public_rate_limits = self.rate_limits()
        limits_given = isinstance(self.values["RATE_LIMITS"], Mapping)
        return RateQueueSettings(
            QUEUES=MappingProxyType(
                self.queues(
                    numbers["MAX_QUEUE_CONCURRENCY"] or None,
                    self.values["RATE_LIMITS"] if limits_given else {},
                )
            ),
            RATE_LIMITS=MappingProxyType(rate_limits),
            PUBLIC_RATE_LIMITS=MappingProxyType(public_rate_limits),
            RATE_LIMIT_ASYNC_COMMIT=self.flag("RATE_LIMIT_ASYNC_COMMIT"),
            RATE_LIMITED_VIEW=self.limited_view(),
            JOB_MODULES=self.job_modules(),
            DEFAULT_RETRIES=self.default_retries(),
            ENQUEUE_RATE_LIMIT=self.enqueue_rate_limit(),
            ENQUEUE_ASYNC_COMMIT=self.flag("ENQUEUE_ASYNC_COMMIT"),
            RETENTION=self.duration("RETENTION", ids.RETENTION, allow_zero=True),
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
            API_THROTTLES=MappingProxyType(self.api_throttles()),
            API_MAX_STREAMS_PER_USER=numbers["API_MAX_STREAMS_PER_USER"],
            API_MAX_WAITING_CLAIMS_PER_KEY=numbers["API_MAX_WAITING_CLAIMS_PER_KEY"],
            CLOCK=self.clock(),
        )


def parse_settings(configured: Any) -> tuple[RateQueueSettings | None, list[Problem]]:
    """Return the settings ``configured`` gives over the defaults, and their problems.

    ``configured`` is ``settings.RATEQUEUE``. The settings are None when there is any
    problem."""
    configured = configured or {}
    if not isinstance(configured, Mapping):
        message = f"settings.RATEQUEUE must be a dict, got {configured!r}."
        return None, [Problem(ids.SETTINGS_NOT_A_DICT, message)]
    parser = _Parser({**DEFAULTS, **configured})
    for name in sorted(set(configured) & set(REMOVED)):
        parser.problem(ids.UNKNOWN_SETTING, f'RATEQUEUE["{name}"] was removed: {REMOVED[name]}')
    unknown = sorted(map(str, set(configured) - set(DEFAULTS) - set(REMOVED)))
    if unknown:
        parser.problem(
            ids.UNKNOWN_SETTING,
            f"Unknown RATEQUEUE setting(s): {', '.join(unknown)}.",
            f"Known settings: {', '.join(sorted(DEFAULTS))}.",
        )
    parsed = parser.parse()
    return (None if parser.problems else parsed), parser.problems


@cache
def ratequeue_settings() -> RateQueueSettings:
    """Return the project's ``RATEQUEUE`` settings merged over :data:`DEFAULTS`.

    Raise ImproperlyConfigured naming every problem when they break a rule."""
    values, problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        listed = "\n".join(f"  {p.id}: {p.message}" for p in problems)
        raise ImproperlyConfigured(
            f"settings.RATEQUEUE is invalid (`manage.py check` says the same):\n{listed}"
        )
    return values


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "RATEQUEUE":
        ratequeue_settings.cache_clear()

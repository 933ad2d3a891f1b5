"""The ``RATEQUEUE`` settings' defaults, and their typed form as the app reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from django_ratequeue.engine.retry import Retry
from django_ratequeue.ratelimit.config import LimitConfig, RateLimitConfig

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
    "SCHEDULES": {},
    "DEFAULT_RETRIES": 6,
    "ENQUEUE_RATE_LIMIT": None,
    "ENQUEUE_ASYNC_COMMIT": False,
    "RETENTION": 7 * 24 * 3600,
    "FAILED_RETENTION": None,
    "ROLLUP_RETENTION": 7 * 24 * 3600,
    "SEGMENT": 0.1,
    "LOOP_LEASE": 10.0,
    "WATCHDOG_INTERVAL": 0.5,
    "HEARTBEAT_INTERVAL": 2.0,
    "WORKER_DEAD_AFTER": 10.0,
    "POLL_INTERVAL": 0.05,
    "STOP_GRACE": 3.0,
    "REMOTE_LEASE": 30.0,
    "UNKNOWN_JOB_PATIENCE": 3600.0,
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
    "API_MAX_STREAMS_PER_ADDRESS": 8,
    "API_WSGI_THREADS": 8,
    "API_STREAM_SHARE": 0.5,
    "API_MAX_WAITING_CLAIMS_PER_KEY": 8,
    "CLOCK": "database",
    "DJANGO_Q_ADMIN": False,
}
# The clocks the app can read (CLOCK): the database server's, or this process's own.
CLOCKS = ("database", "local")


@dataclass(frozen=True)
class QueueConfig:
    """One entry of ``QUEUES``; runtime changes override it (see control.py)."""

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
    # The weight of a key that sets none (docs/key-limits.md): its share of the starts
    # when keys are backlogged, from 1 to MAX_KEY_WEIGHT.
    key_weight: int = 1
    # The dotted path of a function (key) -> {"max_concurrency", "weight"} or None, giving
    # a key's limits where no KeyLimit row does (e.g. from the tenant's plan); None: none.
    key_limits: str | None = None
    # Whether the HTTP API and its event streams show its jobs' eta position to their
    # owners: it counts other owners' jobs (docs/eta.md, "What an estimate tells").
    public_position: bool = False


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
    # Limit name -> its configuration, parsed from the dict form (read-only); a KeyedConfig
    # (the setting's {"per_key": ...}) gives it per key: resolve with get_rate_limit_config.
    RATE_LIMITS: Mapping[str, LimitConfig]
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
    # Recurring schedules declared in settings, as given: parsed and checked by the
    # schedules plug-in (plugins/schedules/sync.py and checks.py; docs/schedules.md).
    SCHEDULES: Any
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
    # How long failed jobs are kept, in seconds (the setting None: as long as RETENTION).
    FAILED_RETENTION: float
    # How long the queues' per-minute figures (plugins/rollups/counting.py) are kept, in seconds.
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
    # How long a job whose function no live worker knows (a newer deploy enqueued it)
    # waits for one that does before it fails with UnknownJob, in seconds from dispatch.
    UNKNOWN_JOB_PATIENCE: float
    # Caps on what a job's row holds, in bytes: the JSON of its arguments and context
    # together (bigger: ValueError at enqueue), of its result (bigger: the attempt fails),
    # and the text of an error message or a traceback (each cut to this size).
    MAX_ARGUMENTS_BYTES: int
    MAX_RESULT_BYTES: int
    MAX_ERROR_BYTES: int
    # A running job's progress and output are written at most once per PROGRESS_INTERVAL
    # seconds (engine/progress.py); the JSON of its progress is at most MAX_PROGRESS_BYTES,
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
    # Event streams open at once per client address of anonymous visitors (whose sessions
    # cost nothing to make), across all processes.
    API_MAX_STREAMS_PER_ADDRESS: int
    # Under WSGI, the request threads of each server process (gunicorn's --threads), and
    # the share of them event streams may hold at once: one more stream is a 429, so the
    # other requests always have threads (api/streamcaps.py, docs/operations.md).
    API_WSGI_THREADS: int
    API_STREAM_SHARE: float
    # Whose clock every time the app writes or compares comes from (clock.py): "database",
    # the database server's, shared by all hosts; or "local", this process's own, which
    # tests move with time-machine or freezegun (one host only: docs/testing.md).
    CLOCK: str
    # Whether the admin keeps django-q2's own task lists (its Successful, Failed, Scheduled
    # and Queued tasks): our jobs never appear there, so they are hidden unless True.
    DJANGO_Q_ADMIN: bool


class Problem(NamedTuple):
    """What is wrong with a setting: a system check's id, message and hint."""

    id: str
    message: str
    hint: str = ""


class Report(Protocol):
    """Keep a problem found in a setting (``_Parser.problem``)."""

    def __call__(self, check_id: str, message: str, hint: str = "") -> None: ...

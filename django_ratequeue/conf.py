"""The ``RATEQUEUE`` settings dict, merged over its defaults.

Read through :func:`ratequeue_settings` so that ``override_settings`` in tests is honoured.
The system checks in :mod:`django_ratequeue.checks` validate the values at start-up.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # Jobs running at once across the whole environment.
    "MAX_CONCURRENCY": 10,
    # Upper bound for any queue's max_concurrency.
    "MAX_QUEUE_CONCURRENCY": 100,
    # name -> {"max_concurrency": int, "key_concurrency": int (jobs per concurrency_key,
    # default 1), "rate_limit": a RATE_LIMITS name (each job reserves its cost and starts
    # when the reservation says), "paused"}; runtime changes: see queue/control.py
    "QUEUES": {},
    # name -> rate-limit config dict ({"kind": "token bucket", "rate": 10, "period": 60})
    "RATE_LIMITS": {},
    # A consume that is its own transaction on PostgreSQL commits without waiting for the
    # WAL flush (synchronous_commit off for it alone): about twice the decisions per second,
    # but a PostgreSQL crash may forget the consumes of its last fraction of a second.
    # Never applies inside a caller's transaction.
    "RATE_LIMIT_ASYNC_COMMIT": True,
    # Dotted path of a view (request, RateLimited) -> HttpResponse for @ratelimit refusals;
    # None answers with a plain-text 429.
    "RATE_LIMITED_VIEW": None,
    # Modules imported at start-up (in web processes and qcluster workers alike) for the
    # jobs they register, besides each installed app's jobs.py: only registered jobs run.
    "JOB_MODULES": [],
    # Retries of a job that sets none: an int, or a dict of Retry fields.
    "DEFAULT_RETRIES": 6,
    # A leaky bucket on enqueues, e.g. {"rate": 200, "period": 1, "capacity": 600}; None is off.
    "ENQUEUE_RATE_LIMIT": None,
    # Like RATE_LIMIT_ASYNC_COMMIT for an enqueue that is its own transaction: more enqueues
    # per second, but a PostgreSQL crash may forget jobs whose caller already got a handle.
    "ENQUEUE_ASYNC_COMMIT": False,
    # How long finished jobs are kept for result() and the admin, in seconds.
    "RETENTION": 7 * 24 * 3600,
    # Main loop timing, in seconds. SEGMENT: the loop's time slice (wake-ups are rounded up
    # to it; runners report completions at most this often).
    "SEGMENT": 0.1,
    "LOOP_LEASE": 10.0,
    "WATCHDOG_INTERVAL": 0.5,
    "HEARTBEAT_INTERVAL": 2.0,
    "WORKER_DEAD_AFTER": 10.0,
    # Jobs one django-q2 task carries at most.
    "DISPATCH_BATCH_SIZE": 50,
    # Caps on what a job's row holds, in bytes: the JSON of its arguments and context
    # together (bigger: ValueError at enqueue), of its result (bigger: the attempt fails),
    # and the text of an error message or a traceback (each cut to this size).
    "MAX_ARGUMENTS_BYTES": 1024 * 1024,
    "MAX_RESULT_BYTES": 1024 * 1024,
    "MAX_ERROR_BYTES": 64 * 1024,
}


@cache
def ratequeue_settings() -> dict[str, Any]:
    """Return the project's ``RATEQUEUE`` settings merged over :data:`DEFAULTS`."""
    configured = getattr(settings, "RATEQUEUE", {}) or {}
    return {**DEFAULTS, **configured}


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "RATEQUEUE":
        ratequeue_settings.cache_clear()

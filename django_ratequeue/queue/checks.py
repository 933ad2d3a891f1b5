"""System checks for RATEQUEUE["QUEUES"], the queue defaults and the loop timing
(ids django_ratequeue.E2xx), so that a typo fails at start-up rather than in the loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, register

from ..conf import ratequeue_settings
from .enqueue import enqueue_rate_config
from .retry import Retry

QUEUE_OPTIONS = {"max_concurrency", "key_concurrency", "rate_limit", "paused"}
POSITIVE_NUMBERS = (
    "SEGMENT",
    "LOOP_LEASE",
    "WATCHDOG_INTERVAL",
    "HEARTBEAT_INTERVAL",
    "WORKER_DEAD_AFTER",
)
POSITIVE_INTEGERS = (
    "MAX_CONCURRENCY",
    "MAX_QUEUE_CONCURRENCY",
    "DISPATCH_BATCH_SIZE",
    "MAX_ARGUMENTS_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ERROR_BYTES",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _error(message: str, hint: str, number: int) -> Error:
    return Error(message, hint=hint, id=f"django_ratequeue.E2{number:02d}")


@register()
def check_queue_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    values = ratequeue_settings()
    errors: list[CheckMessage] = []
    for name in POSITIVE_INTEGERS:
        if not _is_int(values[name]) or values[name] < 1:
            errors.append(_error(f'RATEQUEUE["{name}"] must be a positive integer.', "e.g. 10", 1))
    for name in POSITIVE_NUMBERS:
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(
                _error(f'RATEQUEUE["{name}"] must be a number of seconds above 0.', "", 2)
            )
    if errors:
        return errors
    if values["WORKER_DEAD_AFTER"] <= values["HEARTBEAT_INTERVAL"]:
        errors.append(
            _error(
                'RATEQUEUE["WORKER_DEAD_AFTER"] must be longer than HEARTBEAT_INTERVAL, or '
                "live workers would be declared dead.",
                "Use several heartbeat intervals.",
                3,
            )
        )
    if values["LOOP_LEASE"] <= values["WATCHDOG_INTERVAL"]:
        errors.append(
            _error('RATEQUEUE["LOOP_LEASE"] must be longer than WATCHDOG_INTERVAL.', "", 4)
        )
    retention = values["RETENTION"]
    if isinstance(retention, bool) or not isinstance(retention, int | float) or retention < 0:
        errors.append(_error('RATEQUEUE["RETENTION"] must be seconds, 0 or more.', "", 5))
    try:
        Retry.coerce(values["DEFAULT_RETRIES"])
    except ValueError as error:
        errors.append(_error(f'RATEQUEUE["DEFAULT_RETRIES"] is invalid: {error}', "", 6))
    errors.extend(_check_queues(values))
    enqueue_limit = values["ENQUEUE_RATE_LIMIT"]
    if enqueue_limit is not None and not isinstance(enqueue_limit, Mapping):
        errors.append(
            _error(
                'RATEQUEUE["ENQUEUE_RATE_LIMIT"] must be None or a dict.',
                '{"rate": 200, "period": 1, "capacity": 600}',
                7,
            )
        )
    elif enqueue_limit is not None:
        try:
            enqueue_rate_config()
        except ValueError as error:
            errors.append(
                _error(
                    f'RATEQUEUE["ENQUEUE_RATE_LIMIT"]: {error}',
                    '{"rate": 200, "period": 1, "capacity": 600}',
                    7,
                )
            )
    if not isinstance(values["ENQUEUE_ASYNC_COMMIT"], bool):
        errors.append(
            _error(
                'RATEQUEUE["ENQUEUE_ASYNC_COMMIT"] must be True or False.',
                "True commits a standalone enqueue without waiting for the WAL flush.",
                8,
            )
        )
    return errors


def _check_queues(values: Mapping[str, Any]) -> list[CheckMessage]:
    queues = values["QUEUES"]
    if not isinstance(queues, Mapping):
        return [_error('RATEQUEUE["QUEUES"] must be a dict of name -> options.', "", 10)]
    errors: list[CheckMessage] = []
    ceiling = values["MAX_QUEUE_CONCURRENCY"]
    hint = '{"emails": {"max_concurrency": 2}}'
    for name, options in queues.items():
        where = f'RATEQUEUE["QUEUES"][{name!r}]'
        if not isinstance(options, Mapping):
            errors.append(_error(f"{where} must be a dict of options.", hint, 11))
            continue
        unknown = sorted(set(options) - QUEUE_OPTIONS)
        if unknown:
            errors.append(
                _error(
                    f"{where} has unknown option(s) {', '.join(unknown)}.",
                    f"Known: {', '.join(sorted(QUEUE_OPTIONS))}.",
                    12,
                )
            )
        limit = options.get("max_concurrency", 1)
        if not _is_int(limit) or not 0 <= limit <= ceiling:
            errors.append(
                _error(
                    f"{where}['max_concurrency'] must be an integer from 0 (paused) to "
                    f"MAX_QUEUE_CONCURRENCY ({ceiling}), got {limit!r}.",
                    hint,
                    13,
                )
            )
        per_key = options.get("key_concurrency", 1)
        if not _is_int(per_key) or per_key < 1:
            errors.append(
                _error(f"{where}['key_concurrency'] must be a positive integer.", "", 14)
            )
        rate_limit = options.get("rate_limit")
        if rate_limit is not None and rate_limit not in values["RATE_LIMITS"]:
            errors.append(
                _error(
                    f"{where}['rate_limit'] names {rate_limit!r}, which is not in "
                    'RATEQUEUE["RATE_LIMITS"].',
                    "Define the limit there, or remove the option.",
                    15,
                )
            )
        if not isinstance(options.get("paused", False), bool):
            errors.append(_error(f"{where}['paused'] must be True or False.", "", 16))
    return errors

"""The rules of ``RATEQUEUE["QUEUES"]``: each queue's name and options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from django_ratequeue import check_ids as ids
from django_ratequeue.conf.values import QueueConfig, Report
from django_ratequeue.engine.bounds import (
    MAX_INT,
    MAX_KEY_WEIGHT,
    check_queue_concurrency,
    check_queue_name,
    integer,
)

QUEUE_OPTIONS = {f.name for f in fields(QueueConfig)}
QUEUES_EXAMPLE = '{"emails": {"max_concurrency": 2}}'


def parse_queues(
    queues: Any, problem: Report, ceiling: int | None, limits: Mapping[str, Any]
) -> dict[str, QueueConfig]:
    """Return the queues ``queues`` configures, reporting each problem to ``problem``.

    ``ceiling`` is ``MAX_QUEUE_CONCURRENCY`` (None when it is invalid itself) and
    ``limits`` the rate limits a queue may name."""
    if not isinstance(queues, Mapping):
        problem(
            ids.QUEUES_NOT_A_DICT,
            'RATEQUEUE["QUEUES"] must be a dict of name -> options.',
            QUEUES_EXAMPLE,
        )
        return {}
    parsed: dict[str, QueueConfig] = {}
    for name, options in queues.items():
        config = parse_queue(name, options, problem)
        if config is not None:
            check_limits(name, config, problem, ceiling, limits)
            check_flags(name, config, problem)
            check_key_options(name, config, problem)
            parsed[name] = config
    return parsed


def parse_queue(name: Any, options: Any, problem: Report) -> QueueConfig | None:
    """Return the configuration of queue ``name``, or None if it cannot be read."""
    try:
        check_queue_name(name)
    except ValueError as error:
        problem(ids.QUEUE_NAME, f'RATEQUEUE["QUEUES"] has an invalid name: {error}')
        return None
    where = f'RATEQUEUE["QUEUES"][{name!r}]'
    if not isinstance(options, Mapping):
        problem(ids.QUEUE_NOT_A_DICT, f"{where} must be a dict of options.", QUEUES_EXAMPLE)
        return None
    if "key_concurrency" in options:
        problem(
            ids.QUEUE_KEY_CONCURRENCY,
            f"{where}['key_concurrency'] is no longer an option: each concurrency "
            "key is now its own copy of the queue, with the queue's max_concurrency.",
            "Set max_concurrency to the jobs one key may run at once, and "
            "total_concurrency to cap all keys together.",
        )
    unknown = sorted(map(str, set(options) - QUEUE_OPTIONS - {"key_concurrency"}))
    if unknown:
        problem(
            ids.QUEUE_UNKNOWN_OPTION,
            f"{where} has unknown option(s) {', '.join(unknown)}.",
            f"Known: {', '.join(sorted(QUEUE_OPTIONS))}.",
        )
    return QueueConfig(**{k: v for k, v in options.items() if k in QUEUE_OPTIONS})


def check_limits(
    name: str,
    config: QueueConfig,
    problem: Report,
    ceiling: int | None,
    limits: Mapping[str, Any],
) -> None:
    """Check queue ``name``'s concurrency limits and the rate limit it names."""
    where = f'RATEQUEUE["QUEUES"][{name!r}]'
    if ceiling is not None:
        try:
            check_queue_concurrency(name, config.max_concurrency, ceiling)
        except ValueError as error:
            problem(ids.QUEUE_MAX_CONCURRENCY, f"{where}: {error}", QUEUES_EXAMPLE)
    if config.total_concurrency is not None:
        try:
            integer(
                f"{where}['total_concurrency']", config.total_concurrency, 1, ceiling or MAX_INT
            )
        except ValueError as error:
            problem(ids.QUEUE_TOTAL_CONCURRENCY, str(error), "None (no cap) or e.g. 10")
    rate_limit = config.rate_limit
    if rate_limit is not None and (not isinstance(rate_limit, str) or rate_limit not in limits):
        problem(
            ids.QUEUE_RATE_LIMIT,
            f"{where}['rate_limit'] names {rate_limit!r}, which is not in "
            'RATEQUEUE["RATE_LIMITS"].',
            "Define the limit there, or remove the option.",
        )


def check_flags(name: str, config: QueueConfig, problem: Report) -> None:
    """Check that queue ``name``'s ``paused``, ``remote`` and ``public_position`` are
    booleans."""
    where = f'RATEQUEUE["QUEUES"][{name!r}]'
    if not isinstance(config.paused, bool):
        problem(ids.QUEUE_PAUSED, f"{where}['paused'] must be True or False.")
    if not isinstance(config.remote, bool):
        problem(
            ids.QUEUE_REMOTE,
            f"{where}['remote'] must be True or False.",
            "True: only remote workers (docs/remote-workers.md) run its jobs.",
        )
    if not isinstance(config.public_position, bool):
        problem(
            ids.QUEUE_PUBLIC_POSITION,
            f"{where}['public_position'] must be True or False.",
            "True: the HTTP API shows each job's position to its owner, which counts "
            "other owners' jobs (docs/eta.md).",
        )


def check_key_options(name: str, config: QueueConfig, problem: Report) -> None:
    """Check queue ``name``'s ``key_weight`` and the form of its ``key_limits`` path.

    Whether the path imports is checked by ``checks.py``, once the apps are ready."""
    where = f'RATEQUEUE["QUEUES"][{name!r}]'
    try:
        integer(f"{where}['key_weight']", config.key_weight, 1, MAX_KEY_WEIGHT)
    except ValueError as error:
        problem(ids.QUEUE_KEY_WEIGHT, str(error), "The weight of a key that sets none, e.g. 1.")
    path = config.key_limits
    if path is not None and not (isinstance(path, str) and "." in path.strip(".")):
        problem(
            ids.QUEUE_KEY_LIMITS,
            f"{where}['key_limits'] must be the dotted path of a function, not {path!r}.",
            'e.g. "myapp.plans.key_limits": a function (key) -> {"max_concurrency": n, '
            '"weight": w} or None.',
        )

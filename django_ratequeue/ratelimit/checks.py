"""System checks for ``RATEQUEUE["RATE_LIMITS"]`` and ``RATE_LIMIT_ASYNC_COMMIT`` (ids
``django_ratequeue.E1xx``).

A bad limit would otherwise only fail at the first request that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, register

from ..conf import ratequeue_settings
from .config import parse_config
from .models import RateLimitState

EXAMPLE = '{"login": {"kind": "token bucket", "rate": 10, "period": 3600}}'


@register()
def check_rate_limits(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    limits = ratequeue_settings()["RATE_LIMITS"]
    if not isinstance(limits, Mapping):
        return [
            Error(
                f'RATEQUEUE["RATE_LIMITS"] must be a dict of name -> config, got {limits!r}.',
                hint=f'For example RATEQUEUE["RATE_LIMITS"] = {EXAMPLE}.',
                id="django_ratequeue.E101",
            )
        ]
    errors: list[CheckMessage] = []
    longest = RateLimitState._meta.get_field("name").max_length or 200
    for name, config in limits.items():
        if not isinstance(name, str) or not name or len(name) > longest:
            errors.append(
                Error(
                    f'RATEQUEUE["RATE_LIMITS"] has an invalid name {name!r}.',
                    hint=f"Use a non-empty string of at most {longest} characters.",
                    id="django_ratequeue.E102",
                )
            )
            continue
        try:
            parse_config(config)
        except ValueError as error:
            errors.append(
                Error(
                    f'RATEQUEUE["RATE_LIMITS"][{name!r}] is invalid: {error}',
                    hint=f"For example {EXAMPLE}.",
                    id="django_ratequeue.E103",
                )
            )
    return errors


@register()
def check_async_commit(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    value = ratequeue_settings()["RATE_LIMIT_ASYNC_COMMIT"]
    if isinstance(value, bool):
        return []
    return [
        Error(
            f'RATEQUEUE["RATE_LIMIT_ASYNC_COMMIT"] must be True or False, got {value!r}.',
            hint="True commits standalone decisions without waiting for the WAL flush.",
            id="django_ratequeue.E104",
        )
    ]

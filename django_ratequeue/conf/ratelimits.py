"""The rules of the rate limits in ``RATEQUEUE``: ``RATE_LIMITS`` (public ones with their key
rule), ``ENQUEUE_RATE_LIMIT`` and ``API_THROTTLES``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_ratequeue import check_ids as ids
from django_ratequeue.conf.values import PUBLIC_KEYS, KeyRule, PublicRateLimit, Report
from django_ratequeue.ratelimit.config import (
    LimitConfig,
    RateLimitConfig,
    check_limit_name,
    parse_config,
    parse_limit,
)

RATE_LIMITS_EXAMPLE = '{"login": {"kind": "token bucket", "rate": 10, "period": 3600}}'
ENQUEUE_RATE_LIMIT_EXAMPLE = '{"rate": 200, "period": 1, "capacity": 600}'
API_THROTTLE_SCOPES = ("enqueue", "read")
API_THROTTLES_EXAMPLE = '{"enqueue": {"rate": 100, "period": 60, "capacity": 1000}, "read": None}'


def parse_rate_limits(
    limits: Any, problem: Report
) -> tuple[dict[str, LimitConfig], dict[str, KeyRule]]:
    """Return the limits, and the key rule of each public one."""
    hint = f'For example RATEQUEUE["RATE_LIMITS"] = {RATE_LIMITS_EXAMPLE}.'
    if not isinstance(limits, Mapping):
        problem(
            ids.RATE_LIMITS_NOT_A_DICT,
            f'RATEQUEUE["RATE_LIMITS"] must be a dict of name -> config, got {limits!r}.',
            hint,
        )
        return {}, {}
    parsed: dict[str, LimitConfig] = {}
    public: dict[str, KeyRule] = {}
    for name, config in limits.items():
        try:
            check_limit_name(name)
        except ValueError as error:
            problem(ids.RATE_LIMIT_NAME, f'RATEQUEUE["RATE_LIMITS"] has an invalid name: {error}')
            continue
        if isinstance(config, Mapping) and {"public", "key"} & set(config):
            config = dict(config)
            exposure = public_limit(name, config.pop("public", False), config, problem)
            config.pop("key", None)
            if exposure is not None:
                public[name] = exposure.key
        try:
            parsed[name] = parse_limit(config)
        except ValueError as error:
            problem(
                ids.RATE_LIMIT_CONFIG,
                f'RATEQUEUE["RATE_LIMITS"][{name!r}] is invalid: {error}',
                hint,
            )
    return parsed, public


def public_limit(
    name: str, public: Any, config: Mapping[str, Any], problem: Report
) -> PublicRateLimit | None:
    """Return the limit ``name`` as the HTTP API shows it, or None if it is not public.

    A public limit has ``"public": True``, and the rule that gives the key of the
    requesting user (``"key"``, "user" when not given)."""
    where = f'RATEQUEUE["RATE_LIMITS"][{name!r}]'
    if not isinstance(public, bool):
        problem(ids.RATE_LIMIT_PUBLIC, f"{where}['public'] must be True or False, got {public!r}.")
        return None
    if not public:
        if "key" in config:
            problem(
                ids.RATE_LIMIT_PUBLIC,
                f"{where}['key'] is the key rule of a public limit, but the limit is not public.",
                'Add "public": True, or remove "key" (give key= where it is consumed).',
            )
        return None
    key = config.get("key", "user")
    if not (key is None or callable(key) or key in PUBLIC_KEYS):
        problem(
            ids.RATE_LIMIT_PUBLIC,
            f"{where}['key'] must be None (one value for everybody), "
            f"{', '.join(map(repr, PUBLIC_KEYS))} or a callable (request) -> str, "
            f"got {key!r}.",
            "A header is not a key rule here: the client would choose its own key.",
        )
        return None
    return PublicRateLimit(key)


def parse_enqueue_rate_limit(value: Any, problem: Report) -> RateLimitConfig | None:
    """Return the token bucket of ``ENQUEUE_RATE_LIMIT``, or None (off)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problem(
            ids.ENQUEUE_RATE_LIMIT,
            'RATEQUEUE["ENQUEUE_RATE_LIMIT"] must be None or a dict.',
            ENQUEUE_RATE_LIMIT_EXAMPLE,
        )
        return None
    try:
        return parse_config({"kind": "token bucket", **value})
    except ValueError as error:
        problem(
            ids.ENQUEUE_RATE_LIMIT,
            f'RATEQUEUE["ENQUEUE_RATE_LIMIT"]: {error}',
            ENQUEUE_RATE_LIMIT_EXAMPLE,
        )
        return None


def parse_api_throttles(value: Any, problem: Report) -> dict[str, RateLimitConfig | None]:
    """Return each scope's token bucket, or None (off)."""
    if not isinstance(value, Mapping) or set(value) - set(API_THROTTLE_SCOPES):
        problem(
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
            problem(ids.API_THROTTLES, f"{where}: {error}", API_THROTTLES_EXAMPLE)
    return parsed

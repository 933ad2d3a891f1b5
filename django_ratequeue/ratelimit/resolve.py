"""Resolve a limit's configuration for a key: the one resolver every caller goes through.

A limit's configuration is ``config=`` if given, else ``RATEQUEUE["RATE_LIMITS"][name]``;
a keyed one (:class:`.config.KeyedConfig`) is asked for the key's configuration at each
call, never cached here, so a change of plan applies to the next decision. docs/api.md
("Limits per tenant") tells how a key's stored state carries over.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.ratelimit.config import (
    KeyedConfig,
    LimitConfig,
    RateLimitConfig,
    check_limit_name,
    parse_limit,
)
from django_ratequeue.ratelimit.models import RateLimitState

logger = logging.getLogger(__name__)

ConfigLike = LimitConfig | Mapping[str, Any]

KEY_MAX_LENGTH = RateLimitState._meta.get_field("key").max_length or 255


def row_key(key: str | None) -> str:
    """Return the stored key: ``""`` stands for no key (one limit shared by everyone)."""
    if key is None:
        return ""
    if not isinstance(key, str):
        raise ValueError(f"key must be a string or None, got {key!r}.")
    if len(key) > KEY_MAX_LENGTH:
        raise ValueError(
            f"key is {len(key)} characters long; the most is {KEY_MAX_LENGTH}: hash long keys."
        )
    return key


def get_rate_limit_config(
    name: str, config: ConfigLike | None = None, key: str | None = None
) -> RateLimitConfig:
    """Return the configuration of ``name`` for ``key``: ``config`` if given, else the settings'.

    The one place a limit's configuration is resolved: a keyed limit
    (:class:`~.config.KeyedConfig`) asks its function for ``key`` now, so a change of plan
    applies to the next decision."""
    check_limit_name(name)
    limit = parse_limit(config) if config is not None else _configured(name)
    if isinstance(limit, KeyedConfig):
        return limit.for_key(name, None if key is None else row_key(key))
    return limit


def _configured(name: str) -> LimitConfig:
    limits = ratequeue_settings().RATE_LIMITS
    try:
        return limits[name]
    except KeyError:
        known = ", ".join(map(repr, sorted(limits))) or "none"
        raise ValueError(
            f"Unknown rate limit {name!r}: pass config=TokenBucket(...) or FixedWindow(...) "
            f'or add it to settings.RATEQUEUE["RATE_LIMITS"] (configured: {known}).'
        ) from None


def configured_config(name: str, key: str | None = None) -> RateLimitConfig | None:
    """Return the configuration of ``name`` in settings for ``key``, if it can tell.

    For the pages and figures that show stored rows: ``None`` when ``name`` is not in
    ``RATE_LIMITS`` or its per-key function fails for ``key`` (logged), instead of an
    error."""
    if name not in ratequeue_settings().RATE_LIMITS:
        return None
    try:
        return get_rate_limit_config(name, key=key)
    except ValueError:
        logger.warning("Rate limit %r: no config for key %r", name, key, exc_info=True)
        return None

"""Bind a fixed set of named rate limits (:func:`define_rate_limits`)."""

from __future__ import annotations

from collections.abc import Mapping

from django_ratequeue.ratelimit.config import LimitConfig, check_limit_name, parse_limit
from django_ratequeue.ratelimit.decisions import (
    ConfigLike,
    RateLimitResult,
    check_rate_limit,
    get_rate_limit_value,
    rate_limit,
    reset_rate_limit,
)


class RateLimits:
    """Hold the limits given to :func:`define_rate_limits`; accept only those names.

    Its methods refuse any other name."""

    def __init__(self, limits: Mapping[str, ConfigLike]) -> None:
        parsed: dict[str, LimitConfig] = {}
        for name, value in limits.items():
            check_limit_name(name)
            try:
                parsed[name] = parse_limit(value)
            except ValueError as error:
                raise ValueError(f"Rate limit {name!r}: {error}") from None
        self.configs: Mapping[str, LimitConfig] = parsed

    def __contains__(self, name: object) -> bool:
        return name in self.configs

    def _config(self, name: str) -> LimitConfig:
        try:
            return self.configs[name]
        except KeyError:
            raise ValueError(
                f"Rate limit {name!r} is not one of the defined limits: "
                f"{', '.join(map(repr, self.configs)) or 'none'}."
            ) from None

    def rate_limit(
        self,
        name: str,
        *,
        key: str | None = None,
        count: float = 1,
        reserve: bool = False,
        throws: bool = False,
    ) -> RateLimitResult:
        """Consume from the defined limit ``name``, as :func:`.decisions.rate_limit`."""
        return rate_limit(
            name, key=key, count=count, reserve=reserve, throws=throws, config=self._config(name)
        )

    def check_rate_limit(
        self,
        name: str,
        *,
        key: str | None = None,
        count: float = 1,
        reserve: bool = False,
        throws: bool = False,
    ) -> RateLimitResult:
        """Check the defined limit ``name``, as :func:`.decisions.check_rate_limit`."""
        return check_rate_limit(
            name, key=key, count=count, reserve=reserve, throws=throws, config=self._config(name)
        )

    def reset_rate_limit(
        self, name: str, *, key: str | None = None, all_keys: bool = False
    ) -> None:
        """Reset the defined limit ``name``, as :func:`.decisions.reset_rate_limit`."""
        self._config(name)
        reset_rate_limit(name, key=key, all_keys=all_keys)

    def get_rate_limit_value(self, name: str, *, key: str | None = None) -> float:
        """Read the defined limit ``name``, as :func:`.decisions.get_rate_limit_value`."""
        return get_rate_limit_value(name, key=key, config=self._config(name))


def define_rate_limits(limits: Mapping[str, ConfigLike]) -> RateLimits:
    """Bind a set of named limits, so that a misspelt name fails at the call."""
    return RateLimits(limits)

"""Retry policies: how many more attempts a failed job gets, and how long it waits for each."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields
from typing import Any

from django_ratequeue.engine.bounds import (
    MAX_BACKOFF_FACTOR,
    MAX_DELAY,
    MAX_RETRY_COUNT,
    integer,
    seconds,
)


@dataclass(frozen=True)
class Retry:
    """A retry policy of exponential back-off.

    Attempt ``n`` (1-based) failed → wait
    ``min(initial_interval * backoff_factor ** (n - 1), max_interval)`` seconds, scaled by a
    random factor in [0.8, 1.2] when ``randomize_interval`` so that failing jobs spread out.
    Every field is bounded (:mod:`.bounds`), so that no delay can overflow a datetime.
    """

    retry_count: int = 6
    initial_interval: float = 1.0
    max_interval: float = 3600.0
    backoff_factor: float = 2.0
    randomize_interval: bool = True

    def __post_init__(self) -> None:
        integer("retry_count", self.retry_count, 0, MAX_RETRY_COUNT)
        for name in ("initial_interval", "max_interval"):
            value = seconds(f"Retry {name}", getattr(self, name), MAX_DELAY)
            object.__setattr__(self, name, value)
        factor = self.backoff_factor
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not 1 <= factor <= MAX_BACKOFF_FACTOR
        ):
            raise ValueError(
                f"backoff_factor must be a number from 1 to {MAX_BACKOFF_FACTOR:g}, "
                f"not {factor!r}."
            )
        object.__setattr__(self, "backoff_factor", float(factor))
        if not isinstance(self.randomize_interval, bool):
            raise ValueError(
                f"randomize_interval must be True or False, not {self.randomize_interval!r}."
            )

    def delay(self, failed_attempts: int) -> float:
        """Return the seconds to wait before the attempt after ``failed_attempts`` failures."""
        exponent = max(failed_attempts - 1, 0)
        try:
            base = self.initial_interval * self.backoff_factor**exponent
        except OverflowError:
            base = self.max_interval
        base = min(base, self.max_interval)
        return base * random.uniform(0.8, 1.2) if self.randomize_interval else base

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def coerce(cls, value: Any) -> Retry:
        """Build a policy from a ``retries`` option or the DEFAULT_RETRIES setting.

        Either may be an int, a dict or a Retry."""
        if isinstance(value, Retry):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(map(str, set(value) - known))
            if unknown:
                raise ValueError(
                    f"Unknown retries option(s) {', '.join(unknown)}; "
                    f"known: {', '.join(sorted(known))}."
                )
            return cls(**value)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(retry_count=integer("retries", value, 0, MAX_RETRY_COUNT))
        raise ValueError(
            f"retries must be an int, a dict of Retry fields or a Retry, not {value!r}."
        )

"""Rate-limit configurations: the two kinds, their validation, their dict form, keyed ones.

A configuration is an immutable value; ``period`` (and a fixed window's ``start``) may be a
:class:`~datetime.timedelta` or seconds, the algebra reads ``period_seconds``. With
``shards=N`` each of N rows holds a share (:meth:`per_shard`). Every number is finite and
bounded (``MAX_TOKENS``, ``MIN_PERIOD``...): the arithmetic on a limit, in Python and in
SQL, neither overflows nor runs forever. A :class:`KeyedConfig` gives a limit's
configuration per key (plan tiers), asked at each decision. docs/concepts.md ("Rate
limits") and docs/api.md ("Limits per tenant") tell the rest.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from numbers import Real
from typing import Any, ClassVar, Self, cast

from django.db import DatabaseError
from django.utils.module_loading import import_string

from django_ratequeue.columns import check_name

# The most tokens a limit adds, holds, reserves or is asked for at once.
MAX_TOKENS = 1e15
MIN_PERIOD = 0.001
MAX_PERIOD = 10 * 365 * 24 * 3600.0
MAX_SHARDS = 1024
# A fixed window's start, in seconds from the epoch: within the years 1 to 9999.
MAX_START = 253402300799.0


def _float(value: Any) -> float:
    """Return ``value`` as a float; an int too big for one is infinite (and so refused)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _seconds(value: float | timedelta, field: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{field} must be a number of seconds or a timedelta, got {value!r}.")
    return _float(value)


def _number(value: Any, field: str) -> float:
    number = math.nan if isinstance(value, bool) or not isinstance(value, Real) else _float(value)
    if not math.isfinite(number):
        raise ValueError(f"{field} must be a finite number, got {value!r}.")
    if number > MAX_TOKENS:
        raise ValueError(f"{field} must be at most {MAX_TOKENS:g}, got {value!r}.")
    return number


@dataclass(frozen=True)
class _LimitFields:
    """Hold the validation and derived values both kinds share."""

    kind: ClassVar[str]

    rate: float
    period: float | timedelta
    capacity: float | None = None
    max_reserved: float | None = None

    def _validate(self) -> None:
        name = type(self).__name__
        if _number(self.rate, f"{name}.rate") <= 0:
            raise ValueError(f"{name}.rate must be greater than 0, got {self.rate!r}.")
        period = _seconds(self.period, f"{name}.period")
        if not period > 0:
            raise ValueError(f"{name}.period must be longer than 0 seconds, got {self.period!r}.")
        if not MIN_PERIOD <= period <= MAX_PERIOD:
            raise ValueError(
                f"{name}.period must be from {MIN_PERIOD:g} to {MAX_PERIOD:g} seconds "
                f"(10 years), got {self.period!r}."
            )
        if self.capacity is not None and _number(self.capacity, f"{name}.capacity") < 0:
            raise ValueError(f"{name}.capacity must be 0 or more, got {self.capacity!r}.")
        if (
            self.max_reserved is not None
            and _number(self.max_reserved, f"{name}.max_reserved") < 0
        ):
            raise ValueError(
                f"{name}.max_reserved must be 0 or more (or None for no bound), "
                f"got {self.max_reserved!r}."
            )
        shards = getattr(self, "shards", 1)
        if isinstance(shards, bool) or not isinstance(shards, int) or not 0 < shards <= MAX_SHARDS:
            raise ValueError(
                f"{name}.shards must be an integer from 1 to {MAX_SHARDS}, got {shards!r}."
            )

    @property
    def period_seconds(self) -> float:
        return _seconds(self.period, "period")

    @property
    def max_tokens(self) -> float:
        """The tokens a full bucket (or a fresh window) holds: ``capacity``, else ``rate``."""
        return float(self.rate if self.capacity is None else self.capacity)

    @property
    def shard_count(self) -> int:
        return int(getattr(self, "shards", 1))

    def per_shard(self, shard: int = 0) -> Self:
        """Return the configuration row ``shard`` of the ``shards`` rows enforces: its share."""
        return _shares(self)[shard]

    def smallest_share(self) -> Self:
        """Return the share of the shard with the least capacity: what every shard can admit."""
        return min(_shares(self), key=lambda share: share.max_tokens)

    def largest_count(self, *, reserve: bool) -> float:
        """Return the largest ``count`` that can ever be admitted (``inf`` if any will do)."""
        if not reserve:
            return self.max_tokens
        if self.max_reserved is None:
            return math.inf
        return self.max_tokens + self.max_reserved


@dataclass(frozen=True)
class TokenBucket(_LimitFields):
    """A token bucket: tokens refill continuously at ``rate`` per ``period`` up to ``capacity``.

    The right default: it limits the average rate while letting idle clients burst.
    """

    kind: ClassVar[str] = "token bucket"

    shards: int = 1

    def __post_init__(self) -> None:
        self._validate()


@dataclass(frozen=True)
class FixedWindow(_LimitFields):
    """A fixed window: ``rate`` tokens come at the start of each window of ``period`` seconds.

    Windows start at ``start`` (seconds since the epoch, a timedelta offset from it, or an
    aware datetime) plus whole periods; without ``start`` each key gets a random phase so
    that clients do not all return at the same instant.
    """

    kind: ClassVar[str] = "fixed window"

    start: float | timedelta | datetime | None = None
    shards: int = 1

    def __post_init__(self) -> None:
        self._validate()
        if self.start is not None:
            self._start_seconds()

    def _start_seconds(self) -> float:
        start = self.start
        if isinstance(start, datetime):
            if start.tzinfo is None:
                raise ValueError(f"FixedWindow.start must be an aware datetime, got {start!r}.")
            return start.timestamp()
        seconds = _seconds(start, "FixedWindow.start")  # type: ignore[arg-type]
        if not -MAX_START <= seconds <= MAX_START:
            raise ValueError(
                f"FixedWindow.start must be a finite time within the years 1 to 9999, "
                f"got {start!r}."
            )
        return seconds

    @property
    def start_seconds(self) -> float | None:
        return None if self.start is None else self._start_seconds()


RateLimitConfig = TokenBucket | FixedWindow


def _share_fields(config: _LimitFields, capacity: float, fraction: float) -> dict[str, Any]:
    reserved = None if config.max_reserved is None else config.max_reserved * fraction
    return {
        "rate": config.rate * fraction,
        "capacity": float(capacity),
        "max_reserved": reserved,
        "shards": 1,
    }


@lru_cache(maxsize=1024)
def _shares(config: _LimitFields) -> tuple[Any, ...]:
    """Split ``config`` over its shards in proportion to capacity.

    A whole-number capacity of at least one per shard is split into whole numbers that add
    up to it (100 over 8 shards: 12, 13, 12, 13, ...), so that the shards together admit
    exactly the capacity; otherwise the shares are equal. ``rate`` and ``max_reserved``
    follow each shard's share.
    """
    n = config.shard_count
    if n == 1:
        return (config,)
    total = config.max_tokens
    shares: list[float]
    if total.is_integer() and total >= n:
        shares = [math.floor(total * (i + 1) / n) - math.floor(total * i / n) for i in range(n)]
    else:
        shares = [total / n] * n
    fractions = [share / total if total else 1 / n for share in shares]
    return tuple(
        dataclasses.replace(config, **_share_fields(config, share, fraction))
        for share, fraction in zip(shares, fractions, strict=True)
    )


KINDS: dict[str, type[TokenBucket] | type[FixedWindow]] = {
    TokenBucket.kind: TokenBucket,
    FixedWindow.kind: FixedWindow,
}


def check_limit_name(name: Any) -> str:
    """Return ``name`` if it can name a limit: a non-empty string its rows' column holds."""
    return check_name("A rate-limit name", name, "RateLimitState", "name")


def parse_config(value: RateLimitConfig | Mapping[str, Any]) -> RateLimitConfig:
    """Return the configuration ``value`` describes: a config object or its dict form.

    The dict form is ``{"kind": "token bucket" | "fixed window", "rate": ..., "period":
    ..., ...}`` with the constructor's arguments as the other keys.
    """
    if isinstance(value, TokenBucket | FixedWindow):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            "A rate-limit config must be a TokenBucket, a FixedWindow or a dict such as "
            f'{{"kind": "token bucket", "rate": 10, "period": 60}}; got {value!r}.'
        )
    data = dict(value)
    kind = data.pop("kind", None)
    if kind not in KINDS:
        raise ValueError(
            f"Unknown rate-limit kind {kind!r}; use one of {', '.join(map(repr, KINDS))}."
        )
    cls = KINDS[kind]
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(allowed), key=str)
    if unknown:
        raise ValueError(
            f"Unknown key(s) {', '.join(map(repr, unknown))} for a {kind!r} rate limit; "
            f"allowed: {', '.join(['kind', *allowed])}."
        )
    missing = [name for name in ("rate", "period") if name not in data]
    if missing:
        raise ValueError(f"A {kind!r} rate limit needs {' and '.join(missing)}.")
    return cls(**data)


# --- limits whose configuration depends on the key (plan tiers) ---------------------------

KeyFunction = Callable[[str | None], RateLimitConfig | Mapping[str, Any]]


@lru_cache(maxsize=256)
def _imported(path: str) -> Any:
    """Return the object at the dotted ``path`` (imported once)."""
    return import_string(path)


def _shown(key: str | None) -> str:
    """Return ``key`` for an error message: quoted, and cut short when long."""
    return "None (no key)" if key is None else repr(key[:100] + "..." if len(key) > 100 else key)


@dataclass(frozen=True)
class KeyedConfig:
    """A limit whose configuration ``function(key)`` gives: plan tiers, asked at each decision.

    ``function`` is a callable ``(key) -> TokenBucket | FixedWindow | dict form`` or its
    dotted path; it gets the key as passed (``None`` for the limit without a key). Every
    configuration it returns must have ``shards`` shards, so that a key's rows stay the
    same rows when its plan changes.
    """

    function: KeyFunction | str
    shards: int = 1

    def __post_init__(self) -> None:
        function = self.function
        if not (callable(function) or (isinstance(function, str) and function)):
            raise ValueError(
                "KeyedConfig.function must be a callable (key) -> rate-limit config or its "
                f"dotted path, got {function!r}."
            )
        shards = self.shards
        if isinstance(shards, bool) or not isinstance(shards, int) or not 0 < shards <= MAX_SHARDS:
            raise ValueError(
                f"KeyedConfig.shards must be an integer from 1 to {MAX_SHARDS}, got {shards!r}."
            )

    @property
    def path(self) -> str:
        """Return the function's dotted path, to name it in messages."""
        function = self.function
        if isinstance(function, str):
            return function
        module = getattr(function, "__module__", None) or "?"
        return f"{module}.{getattr(function, '__qualname__', repr(function))}"

    def load(self, name: str) -> KeyFunction:
        """Return the function, imported if given by path; ``ValueError`` if it cannot be."""
        if not isinstance(self.function, str):
            return self.function
        try:
            function = _imported(self.function)
        except ImportError as error:
            raise ValueError(
                f"Rate limit {name!r}: its per-key config function {self.function!r} cannot "
                f"be imported: {error}"
            ) from None
        if not callable(function):
            raise ValueError(
                f"Rate limit {name!r}: its per-key config {self.function!r} is not callable "
                f"(got {type(function).__name__})."
            )
        return cast("KeyFunction", function)

    def for_key(self, name: str, key: str | None) -> RateLimitConfig:
        """Return the configuration of limit ``name`` for ``key``, asking the function now.

        Whatever goes wrong (the function raises, returns something that is not a valid
        configuration or has another shard count) is a ``ValueError`` naming the limit and
        the key. A database error is raised as it is: the caller's transaction is broken."""
        function = self.load(name)
        where = f"Rate limit {name!r}: its per-key config {self.path}"
        try:
            value = function(key)
        except DatabaseError:
            raise
        except Exception as error:
            raise ValueError(
                f"{where} raised for key {_shown(key)}: {type(error).__name__}: {error}"
            ) from error
        try:
            config = parse_config(value)
        except ValueError as error:
            raise ValueError(
                f"{where} returned an invalid config for key {_shown(key)}: {error}"
            ) from None
        if config.shard_count != self.shards:
            raise ValueError(
                f"{where} returned {config.shard_count} shard(s) for key {_shown(key)}, but the "
                f"limit is declared with {self.shards}: every key's config must have the "
                'declared shards (set shards= on the KeyedConfig, or per_key\'s "shards").'
            )
        return config


LimitConfig = RateLimitConfig | KeyedConfig


def parse_limit(value: LimitConfig | Mapping[str, Any]) -> LimitConfig:
    """Return the limit ``value`` describes: a configuration, or a :class:`KeyedConfig`.

    Besides :func:`parse_config`'s forms, ``{"per_key": function or dotted path,
    "shards": n}`` declares a keyed limit."""
    if isinstance(value, KeyedConfig):
        return value
    if isinstance(value, Mapping) and "per_key" in value:
        unknown = sorted(set(value) - {"per_key", "shards"}, key=str)
        if unknown:
            raise ValueError(
                f"Unknown key(s) {', '.join(map(repr, unknown))} for a per-key rate limit; "
                "allowed: 'per_key' (the function of the key, or its dotted path), 'shards'."
            )
        return KeyedConfig(value["per_key"], value.get("shards", 1))
    return parse_config(value)

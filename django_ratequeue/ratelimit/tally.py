"""What one request drew from each rate limit, to tell a refusal that is only a matter of
time from one that can never be admitted.

An enqueue over HTTP calls the job's ``http_options`` once per item, and each may draw
from a limit (the asker's budget, say). :func:`tallied` adds up the draws of such a
request; when one of them is refused, :meth:`Tally.never_fits` says whether the request
as a whole needs more than the limit can ever hold: that is a 400, not a 429 to retry
forever. docs/http-api.md ("Errors").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from django_ratequeue.exceptions import RateLimited
from django_ratequeue.ratelimit.config import RateLimitConfig


@dataclass
class Drawn:
    """The tokens a request drew from one limit and key, and whether any draw reserved."""

    config: RateLimitConfig
    count: float = 0.0
    reserve: bool = False


@dataclass
class Tally:
    """The draws of one request, by limit name and key."""

    drawn: dict[tuple[str, str | None], Drawn] = field(default_factory=dict)

    def never_fits(self, refused: RateLimited) -> str | None:
        """Return why the request can never be admitted by the limit that ``refused`` it.

        That is when its draws on it add up to more than the limit holds (its capacity,
        plus ``max_reserved`` for reservations); else return None (wait and retry)."""
        drawn = self.drawn.get((refused.name, refused.key))
        if drawn is None:
            return None
        share = drawn.config.smallest_share()
        largest = share.largest_count(reserve=drawn.reserve)
        if drawn.count <= largest:
            return None
        reserved = f" plus max_reserved {share.max_reserved:g}" if drawn.reserve else ""
        return (
            f"The request needs {drawn.count:g} tokens of the rate limit {refused.name!r}, "
            f"which holds at most {largest:g} (capacity {share.max_tokens:g}{reserved}): "
            "it can never be admitted. Send fewer items at once."
        )


_current: ContextVar[Tally | None] = ContextVar("ratequeue_tally", default=None)


@contextmanager
def tallied() -> Iterator[Tally]:
    """Add up the draws made in the block (:func:`add`)."""
    tally = Tally()
    token = _current.set(tally)
    try:
        yield tally
    finally:
        _current.reset(token)


def add(name: str, key: str | None, config: RateLimitConfig, count: float, reserve: bool) -> None:
    """Count a draw of ``count`` tokens from ``name`` for ``key``, inside :func:`tallied`."""
    tally = _current.get()
    if tally is None:
        return
    drawn = tally.drawn.setdefault((name, key), Drawn(config))
    drawn.count += count
    drawn.reserve = drawn.reserve or reserve

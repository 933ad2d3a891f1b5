"""What a rate-gated queue's limit holds, as an estimate reads it (:class:`Tokens`).

When the limit will hold some more tokens than it owes, and whether the dispatch's
reservation of them would be refused (``max_reserved``): read once per limit and row, for
:mod:`.eta` and the next step it simulates (:class:`.rounds.NextStep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django_ratequeue.engine.capacity import rate_row
from django_ratequeue.ratelimit.algebra import refill_time
from django_ratequeue.ratelimit.config import RateLimitConfig
from django_ratequeue.ratelimit.decisions import get_rate_limit_config, shard_states


@dataclass(frozen=True)
class Held:
    """A limit's row as of ``now``: its tokens (negative: owed) and its state's time."""

    config: RateLimitConfig
    value: float
    ts: float


class Tokens:
    """Read rate limits' rows as of ``now``, each once."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._held: dict[tuple[str, str | None], Held | None] = {}

    def held(self, name: str, key: str) -> Held | None:
        """Return the row of ``name`` the concurrency ``key`` draws from, as of now.

        A keyed limit (plan tiers) is the key's own, as the dispatch draws from it. None:
        its configuration cannot be told (a keyed limit's function failed: the dispatch
        fails such a job)."""
        row = rate_row(name, key)
        if (name, row) not in self._held:
            now = self.now.timestamp()
            try:
                config = get_rate_limit_config(name, key=row)
            except ValueError:
                self._held[(name, row)] = None
                return None
            states = shard_states(name, config, row, now)
            value = sum(state.value for state in states.values())
            ts = min((state.ts for state in states.values()), default=now)
            self._held[(name, row)] = Held(config, value, ts)
        return self._held[(name, row)]

    def at(self, name: str, key: str, needed: int) -> datetime | None:
        """Return when rate limit ``name`` will hold ``needed`` more tokens than it owes
        (None: it cannot be told)."""
        held = self.held(name, key)
        if held is None:
            return None
        at = refill_time(held.config, held.value, held.ts, needed, self.now.timestamp())
        return datetime.fromtimestamp(at, UTC)

    def refused(self, name: str, key: str, needed: int) -> bool:
        """Say whether reserving ``needed`` tokens would pass the limit's ``max_reserved``."""
        held = self.held(name, key)
        if held is None or held.config.max_reserved is None:
            return False
        return held.value - needed < -held.config.max_reserved

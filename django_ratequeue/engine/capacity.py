"""The limits in force and the places they leave: the one rule of how many jobs may run.

:class:`Capacity` is read once per step (the loop's) or per page (an estimate's): the
queues' limits (:class:`~.limits.Queues`), the keys' own limits and weights
(:class:`~.keyshares.KeyLimits`), the keyed rate limits (plan tiers) and the places the
running attempts hold (:class:`Places`). The dispatch asks it which jobs may start and
:mod:`.eta` asks it the same questions to tell when they will; a subtask wait asks it
how many places a copy of a queue has. docs/concepts.md tells what a place is.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from django_ratequeue.conf import RateQueueSettings, ratequeue_settings
from django_ratequeue.engine.fairness.shares import KeyLimits
from django_ratequeue.engine.limits import QueueLimits, Queues
from django_ratequeue.engine.models import Attempt, Job, QueueSetting
from django_ratequeue.ratelimit.config import KeyedConfig


@dataclass
class Places:
    """Count the places under the limits that running attempts hold.

    In the environment, per queue, per copy: a place under a limit, not a worker
    process's slot (docs/concepts.md, glossary).

    A copy of a queue is (queue, concurrency key), with the key "" for jobs without
    one."""

    environment: int = 0
    per_queue: Counter[str] = field(default_factory=Counter)
    per_copy: Counter[tuple[str, str]] = field(default_factory=Counter)

    @classmethod
    def held_by(cls, running: Iterable[Attempt]) -> Places:
        """Count the places ``running`` hold."""
        running = list(running)
        in_queue = [a for a in running if a.holds_queue_slot]
        return cls(
            environment=sum(a.holds_environment_slot for a in running),
            per_queue=Counter(a.queue for a in in_queue),
            per_copy=Counter((a.queue, a.concurrency_key) for a in in_queue),
        )

    def take(self, queue: str, key: str) -> None:
        """Count one more place of ``queue``'s copy for ``key``."""
        self.per_queue[queue] += 1
        self.per_copy[(queue, key)] += 1


class Capacity:
    """The limits in force for one step, and the places the running attempts hold.

    ``environment``: MAX_CONCURRENCY as in force (None: read when first needed);
    ``keys``: the keys' limits, which a loop keeps across steps (None: read afresh)."""

    def __init__(
        self,
        environment: int | None = None,
        keys: KeyLimits | None = None,
        overrides: dict[str, QueueSetting] | None = None,
    ) -> None:
        self.queues = Queues(environment, overrides)
        self.keys = KeyLimits() if keys is None else keys
        self.places = Places()

    @property
    def environment(self) -> int:
        """``MAX_CONCURRENCY`` as in force."""
        return self.queues.environment

    def hold(self, running: Iterable[Attempt]) -> Places:
        """Count the places ``running`` hold, from now on, and return them."""
        self.places = Places.held_by(running)
        return self.places

    def fork(self) -> Capacity:
        """Return a capacity of the same limits, counting a copy of the places held.

        What a simulated step takes then leaves this one's places as they are."""
        other = copy.copy(self)
        held = self.places
        other.places = Places(held.environment, Counter(held.per_queue), Counter(held.per_copy))
        return other

    def limits(self, queue: str) -> QueueLimits:
        """Return queue ``queue``'s limits."""
        return self.queues.limits(queue)

    def limit_of(self, queue: str, key: str, job_own: int | None) -> int:
        """Return the limit of key ``key``'s copy of ``queue`` (see KeyLimits.copy_limit)."""
        return self.keys.copy_limit(queue, key, self.limits(queue), job_own)

    def paused(self, queue: str, key: str, job_own: int | None) -> bool:
        """Say whether none of the copy's jobs may start: its queue or its key is paused."""
        return self.limits(queue).max_concurrency == 0 or self.limit_of(queue, key, job_own) == 0

    def environment_free(self) -> int:
        """Return how many more places the environment has (may be negative)."""
        return self.environment - self.places.environment

    def room(self, queue: str) -> int:
        """Return how many jobs queue ``queue`` may start now, at most (0 or less: none)."""
        limits = self.limits(queue)
        if limits.max_concurrency == 0:
            return 0
        if not limits.total_concurrency:  # no cap over the keys
            return self.environment_free()
        in_queue = self.places.per_queue[queue]
        return min(limits.total_concurrency - in_queue, self.environment_free())

    def queue_full(self, queue: str) -> bool:
        """Say whether the queue's keys together hold ``total_concurrency`` places."""
        total = self.limits(queue).total_concurrency or math.inf
        return self.places.per_queue[queue] >= total

    def copy_full(self, queue: str, key: str, job_own: int | None) -> bool:
        """Say whether key ``key``'s copy of ``queue`` holds all its places."""
        return self.places.per_copy[(queue, key)] >= self.limit_of(queue, key, job_own)

    def free(self, queue: str, key: str, job_own: int | None) -> int:
        """Return how many of the copy's jobs may start now, ignoring the other copies' work."""
        limits = self.limits(queue)
        free = min(
            self.limit_of(queue, key, job_own) - self.places.per_copy[(queue, key)],
            (limits.total_concurrency or math.inf) - self.places.per_queue[queue],
            self.environment_free(),
        )
        return max(int(free), 0)

    def takes(self, queue: str, keys: list[str], room: int) -> dict[str, int]:
        """Return how many next jobs of each of ``keys`` the queue's copies could start.

        An unconfigured queue counts up to MAX_QUEUE_CONCURRENCY per key: its jobs'
        own limits are checked per job."""
        self.keys.load(queue, keys)
        ceiling = ratequeue_settings().MAX_QUEUE_CONCURRENCY
        per_queue = self.limits(queue).max_concurrency or ceiling
        takes = {}
        for key in keys:
            own = self.keys.of(queue, key).max_concurrency
            limit = per_queue if own is None else own
            takes[key] = min(room, limit - self.places.per_copy[(queue, key)])
        return takes

    def weights(self, queue: str, keys: list[str]) -> dict[str, int]:
        """Return the weight of each of ``keys`` in ``queue``."""
        return {key: self.keys.weight(queue, key) for key in keys}

    def take(self, queue: str, key: str) -> None:
        """Count one more place of ``queue``'s copy for ``key``."""
        self.places.take(queue, key)

    def resume(self, resuming: list[Attempt]) -> list[Attempt]:
        """Give back their places to ``resuming`` attempts (their subtask ended), in order,
        while the limits leave them; return those granted (their jobs' limits are read)."""
        if not resuming:
            return []
        jobs = Job.objects.filter(pk__in=[a.job_id for a in resuming])
        own_limits = dict(jobs.values_list("pk", "max_concurrency"))
        granted = []
        for attempt in resuming:
            queue, key = attempt.queue, attempt.concurrency_key
            needs_queue_slot = not attempt.holds_queue_slot
            own = own_limits.get(attempt.job_id)
            if self.environment_free() <= 0 or (
                needs_queue_slot and (self.copy_full(queue, key, own) or self.queue_full(queue))
            ):
                continue
            self.places.environment += 1
            if needs_queue_slot:
                self.take(queue, key)
            granted.append(attempt)
        return granted


def rate_keyed(limit_name: str, settings: RateQueueSettings | None = None) -> bool:
    """Say whether rate limit ``limit_name`` is keyed: each key draws from its own plan."""
    limits = (settings or ratequeue_settings()).RATE_LIMITS
    return isinstance(limits.get(limit_name), KeyedConfig)


def rate_row(limit_name: str, key: str, settings: RateQueueSettings | None = None) -> str | None:
    """Return the key of ``limit_name``'s state a job of concurrency key ``key`` draws from.

    The concurrency key's own for a keyed limit (plan tiers), else the limit's one row."""
    return (key or None) if rate_keyed(limit_name, settings) else None

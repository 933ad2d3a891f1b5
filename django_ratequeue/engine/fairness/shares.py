"""Each concurrency key's limits as the loop applies them, and its weighted turn.

:class:`KeyLimits` keeps, per process, what a key's :class:`~.models.KeyLimit` row says,
else what its queue's ``key_limits`` function says, dropped when the version moves
(:func:`~.keylimits.refresh_key_limits`) or after :data:`KEPT_FOR` seconds;
:func:`weighted_rounds` orders the keys' next jobs in weighted turns (deficit round
robin). docs/key-limits.md tells why.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, partial, reduce
from typing import Any

from django.db.models import Q
from django.utils.module_loading import import_string

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import MAX_KEY_WEIGHT
from django_ratequeue.engine.fairness.models import KeyLimit
from django_ratequeue.engine.heads import LeaseHead, register_lease_head
from django_ratequeue.engine.limits import QueueLimits, runtime_limit_sql
from django_ratequeue.engine.models import Job

logger = logging.getLogger("django_ratequeue.queue")

# The longest a process keeps what it read of the keys' limits, in seconds (a function's
# answers may change without refresh_key_limits()).
KEPT_FOR = 60.0
# The most keys a process keeps; beyond, it forgets them all and reads again.
MOST_KEPT = 100_000
# Keys read in one query.
READ_CHUNK = 500


@dataclass(frozen=True)
class KeySettings:
    """A key's own limits: None for either is the queue's default."""

    max_concurrency: int | None = None
    weight: int | None = None


DEFAULTS = KeySettings()


class KeyLimits:
    """Keep the keys' limits this process read: a row's, else the queue's function's."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.read_at = 0.0
        self.known: dict[tuple[str, str], KeySettings] = {}
        # Per queue, whether it has any KeyLimit row (one index probe per queue and version).
        self.with_rows: dict[str, bool] = {}

    def watch(self, version: int | None) -> None:
        """Forget what was read if the keys' limits changed since (``version`` moved)."""
        stale = time.monotonic() - self.read_at > KEPT_FOR or len(self.known) > MOST_KEPT
        if version != self.version or stale:
            self.known.clear()
            self.with_rows.clear()
            self.version, self.read_at = version, time.monotonic()

    def load(self, queue: str, keys: Iterable[str]) -> None:
        """Read the limits of those of ``keys`` not known yet: one query per chunk.

        None for a queue without rows, which most are."""
        missing = [key for key in keys if (queue, key) not in self.known]
        if missing and queue not in self.with_rows:
            self.with_rows[queue] = KeyLimit.objects.filter(queue=queue).exists()
        if not self.with_rows.get(queue, True):
            self.known.update(((queue, key), computed(queue, key)) for key in missing)
            return
        for start in range(0, len(missing), READ_CHUNK):
            chunk = missing[start : start + READ_CHUNK]
            rows = KeyLimit.objects.filter(queue=queue, key__in=chunk).values_list(
                "key", "max_concurrency", "weight"
            )
            found = {key: KeySettings(limit, weight) for key, limit, weight in rows}
            for key in chunk:
                self.known[(queue, key)] = found.get(key) or computed(queue, key)

    def of(self, queue: str, key: str) -> KeySettings:
        """Return key ``key``'s own limits in ``queue`` (read by :meth:`load`)."""
        if (queue, key) not in self.known:
            self.load(queue, [key])
        return self.known[(queue, key)]

    def copy_limit(self, queue: str, key: str, limits: QueueLimits, job_own: int | None) -> int:
        """Return the limit of key ``key``'s copy of ``queue``, whose limits are ``limits``.

        The one rule that dispatch, eta and subtask waits apply: the key's own (a KeyLimit
        row, else the queue's ``key_limits`` function), else the queue's (``job_own``: the
        limit the job set at enqueue, for a queue not configured)."""
        own = self.of(queue, key).max_concurrency
        return limits.limit_for(job_own) if own is None else own

    def weight(self, queue: str, key: str) -> int:
        """Return key ``key``'s weight in ``queue``: its own, else the queue's key_weight."""
        own = self.of(queue, key).weight
        return default_weight(queue) if own is None else own


def key_settings(copies: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[KeySettings, str]]:
    """Return each (queue, key)'s own limits and where they come from: "row" or "function".

    The rows in one query (for a few keys: the dashboard's busiest); a key without a row
    is asked of its queue's function, if any ("": neither)."""
    if not copies:
        return {}
    wanted = reduce(operator.or_, (Q(queue=queue, key=key) for queue, key in copies))
    rows = KeyLimit.objects.filter(wanted).values_list("queue", "key", "max_concurrency", "weight")
    found = {(queue, key): KeySettings(limit, weight) for queue, key, limit, weight in rows}
    settings: dict[tuple[str, str], tuple[KeySettings, str]] = {}
    for copy in copies:
        if copy in found:
            settings[copy] = (found[copy], "row")
            continue
        answer = computed(*copy)
        settings[copy] = (answer, "function" if answer != DEFAULTS else "")
    return settings


def default_weight(queue: str) -> int:
    """Return the weight of queue ``queue``'s keys that set none (its ``key_weight``)."""
    config = ratequeue_settings().QUEUES.get(queue)
    return 1 if config is None else config.key_weight


def computed(queue: str, key: str) -> KeySettings:
    """Return what queue ``queue``'s ``key_limits`` function says of ``key`` (none: defaults).

    A function that raises or answers what cannot be a limit is logged, and the defaults
    are used."""
    config = ratequeue_settings().QUEUES.get(queue)
    if config is None or config.key_limits is None:
        return DEFAULTS
    try:
        answer = key_function(config.key_limits)(key)
    except Exception:
        logger.exception("The key_limits function of queue %r failed for key %r", queue, key)
        return DEFAULTS
    return settings_from(queue, key, answer)


def settings_from(queue: str, key: str, answer: Any) -> KeySettings:
    """Return a ``key_limits`` function's ``answer`` as KeySettings, leaving out bad values."""
    if answer is None:
        return DEFAULTS
    if not isinstance(answer, Mapping):
        message = "The key_limits function of queue %r answered %r for key %r, not a dict"
        logger.error(message, queue, answer, key)
        return DEFAULTS
    ceiling = ratequeue_settings().MAX_QUEUE_CONCURRENCY
    limit = valid(queue, key, "max_concurrency", answer.get("max_concurrency"), 0, ceiling)
    weight = valid(queue, key, "weight", answer.get("weight"), 1, MAX_KEY_WEIGHT)
    return KeySettings(limit, weight)


def valid(queue: str, key: str, name: str, value: Any, low: int, high: int) -> int | None:
    """Return ``value`` if it is None or an int from ``low`` to ``high``; else log, None."""
    if value is None or (type(value) is int and low <= value <= high):
        return value
    message = "The key_limits function of queue %r gave key %r the %s %r, not from %d to %d"
    logger.error(message, queue, key, name, value, low, high)
    return None


@cache
def key_function(path: str) -> Callable[[str], Any]:
    """Return the function at dotted ``path`` (imported once per process)."""
    function: Callable[[str], Any] = import_string(path)
    return function


def weighted_rounds(
    keys: list[str], jobs: Mapping[str, list[Job]], weights: Mapping[str, int], credit: int
) -> list[tuple[Job, int, int]]:
    """Return the keys' jobs in weighted turns: each with its round and its key's credit left.

    Deficit round robin: in each round, a key of weight w offers its next w jobs (in the
    order of ``jobs``), the keys in the order of ``keys``. With ``credit``, the first key
    is the one served last, which first offers what its turn left (``credit`` jobs) and
    takes its next turns after every other key. Ordered by priority, round, turn."""
    offers: list[tuple[Job, int, int, int]] = []
    for position, key in enumerate(keys):
        weight = weights[key]
        first = min(credit, weight) if position == 0 else 0
        for ordinal, job in enumerate(jobs.get(key, [])):
            if ordinal < first:  # the rest of its last turn
                offers.append((job, 0, position, first - ordinal - 1))
                continue
            beyond = ordinal - first
            place = len(keys) if first else position
            offers.append((job, beyond // weight, place, weight - beyond % weight - 1))
    offers.sort(key=lambda offer: (-offer[0].priority, offer[1], offer[2]))
    return [(job, round_, left) for job, round_, _place, left in offers]


def key_limits_problems() -> list[tuple[str, str]]:
    """Return (queue, message) for each queue whose ``key_limits`` is not a callable."""
    problems = []
    for name, config in ratequeue_settings().QUEUES.items():
        if config.key_limits is None:
            continue
        try:
            function = import_string(config.key_limits)
        except ImportError as error:
            problems.append((name, f"cannot be imported: {error}"))
            continue
        if not callable(function):
            problems.append((name, f"is {function!r}, not a function"))
    return problems


# RuntimeLimits.key_limits_version: moves when keys' limits change (engine/fairness/keylimits.py).
register_lease_head(
    LeaseHead(
        "key_limits_version",
        partial(runtime_limit_sql, column="key_limits_version"),
        lambda values: values[0] or 0,
    )
)

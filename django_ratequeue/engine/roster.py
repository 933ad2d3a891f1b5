"""Whom a step's new attempts wake: the runner that will take each, not every runner.

The loop keeps a :class:`Roster` of the serving runners (their heartbeats: which functions
each knows, and how many slots it has), read again every ``WATCHDOG_INTERVAL``, and counts
each runner's free slots from the active attempts the step read. A local attempt it
starts wakes one runner that knows its function and has a slot free, on that runner's own
channel (:func:`runner_channel`); an attempt it cannot place so, and a remote one, wakes
every listener (``WORK``), as does an attempt whose runner left it unclaimed for
``CLAIM_GRACE``. docs/concepts.md ("One wake-up protocol") tells why.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine.heartbeat import LiveWorker, live_workers, worker_id
from django_ratequeue.engine.models import Attempt, Job
from django_ratequeue.engine.wakeup import WORK

# How long a runner woken for an attempt has to claim it before every runner is woken.
CLAIM_GRACE = timedelta(seconds=1)


def runner_channel(worker: str) -> str:
    """Return the channel that wakes the runner of worker process ``worker`` alone."""
    return f"{WORK}_{hashlib.blake2s(worker.encode(), digest_size=8).hexdigest()}"


class Roster:
    """Choose the runners a step's new attempts wake, and wake all for those left unclaimed."""

    def __init__(self, settings: RateQueueSettings) -> None:
        # A runner's slots where its heartbeat does not say (written before it did).
        self.slots = settings.SLOTS
        # The runner of the leader's own process, whose steps hold the GIL it would need.
        self.own = worker_id()
        self.read_every = settings.WATCHDOG_INTERVAL
        self.read_at = -float("inf")
        # What each serving runner's heartbeat says (functions, slots), by its worker id,
        # as last read.
        self.runners: dict[str, LiveWorker] = {}
        # Where the choice among equally free runners starts, moved on at each choice.
        self.turn = itertools.count()
        # The jobs whose new attempt woke one runner: which, and until when it may claim
        # it alone. Until claimed, the attempt counts against that runner's free slots.
        self.called: dict[str, tuple[str, datetime]] = {}

    def channels(
        self, started: Iterable[tuple[Job, Attempt]], active: list[Attempt], now: datetime
    ) -> set[str]:
        """Return the channels that wake the runners for ``started``, the step's new
        attempts with their jobs, and for the attempts called before and left unclaimed.

        ``active`` are the step's active attempts (the new ones among them)."""
        channels = self.recall(active, now)
        started = list(started)
        if not started:
            return channels
        self.read(now)
        free = self.free_slots(active)
        for job, attempt in started:
            runner = None if attempt.remote else self.choose(job.func, free)
            if runner is None:
                channels.add(WORK)
                continue
            free[runner] -= 1
            self.called[job.pk] = (runner, now + CLAIM_GRACE)
            channels.add(runner_channel(runner))
        return channels

    def next_recall(self) -> datetime | None:
        """Return when an attempt called now must be claimed, or every runner is woken."""
        return min((deadline for _runner, deadline in self.called.values()), default=None)

    def recall(self, active: list[Attempt], now: datetime) -> set[str]:
        """Forget the called attempts claimed since; return ``{WORK}`` if one outstayed
        ``CLAIM_GRACE`` unclaimed (its runner was full, stopping or gone)."""
        unclaimed = {a.job_id for a in active if not a.worker and not a.remote}
        late = False
        for job_id, (_runner, deadline) in list(self.called.items()):
            if job_id not in unclaimed:
                del self.called[job_id]
            elif deadline <= now:
                del self.called[job_id]
                late = True
        return {WORK} if late else set()

    def read(self, now: datetime) -> None:
        """Read the serving runners again if ``WATCHDOG_INTERVAL`` passed since the last read."""
        if time.monotonic() - self.read_at < self.read_every:
            return
        self.read_at = time.monotonic()
        self.runners = live_workers(now, serving=True)

    def free_slots(self, active: list[Attempt]) -> Counter[str]:
        """Return each serving runner's free slots: those the active attempts it holds
        leave, less the attempts it was woken for and has not claimed yet."""
        held = Counter(a.worker for a in active if a.worker and not a.remote)
        held.update(runner for runner, _deadline in self.called.values())
        return Counter(
            {
                runner: (seen.slots or self.slots) - held[runner]
                for runner, seen in self.runners.items()
            }
        )

    def choose(self, func: str, free: Counter[str]) -> str | None:
        """Return the runner to take a job of ``func`` (None: no runner can).

        One that knows ``func`` and has a free slot: another process's before the leader's
        own, whose steps hold the GIL its slots would need; then the most free slots; among
        equals, each choice starts one further along the roster."""
        knowing = [r for r in self.runners if free[r] > 0 and func in self.runners[r].functions]
        if not knowing:
            return None
        start = next(self.turn) % len(knowing)
        rotated = knowing[start:] + knowing[:start]
        return max(rotated, key=lambda runner: (runner != self.own, free[runner]))

"""Dispatch: which WAITING jobs start now, within every limit, and in which batches.

:class:`Dispatch` is the loop's memory of turns over queues and concurrency keys and of
rate-gated queues; per step it gives resuming subtask waits their slots back, then picks
jobs by priority, round over the keys and the queues' turn (:mod:`.keys` reads the
candidates), reserves their cost from a queue's rate limit, and creates their attempts, for runners
to claim. docs/concepts.md ("The main loop", "Runners") tells why.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal

from ..conf import RateQueueSettings
from ..db import execute, server_statement
from ..ratelimit.decisions import rate_limit
from .bulk import insert_rows
from .keys import keys_in_turn, next_jobs, ready_key
from .limits import QueueLimits, environment_limit, queue_overrides
from .models import (
    Attempt,
    Job,
    LoopState,
    Status,
    Wait,
    queue_connection,
)
from .rollups import Tally
from .transitions import fail_job, isolated

# Concurrency keys looked at per queue beyond its free slots, to get past busy keys.
KEY_LOOKAHEAD = 100
# Queues with waiting work looked at per step, in turns from LoopState.queue_cursor.
QUEUES_PER_STEP = 1000
# What a rate-gated queue's reservation says about a job (see Dispatch.reserve_tokens).
TokenGate = Literal["now", "later", "parked", "unfit"]
# The most ready times of reserved jobs kept (Dispatch.ready_at); beyond, they are forgotten.
READY_AT_KEPT = 100_000


class Dispatch:
    """The starting of jobs, step after step of one pass."""

    def __init__(self, settings: RateQueueSettings) -> None:
        self.settings = settings
        # MAX_CONCURRENCY as in force for this step (read_limits).
        self.max_concurrency = settings.MAX_CONCURRENCY
        # Queues whose rate limit refused a start, and when to try again.
        self.rate_limited_until: dict[str, datetime] = {}
        # Per queue, the concurrency key served last (LoopState.key_cursors, read once),
        # and the queue served last (LoopState.queue_cursor).
        self.key_cursors: dict[str, str] | None = None
        self.queue_cursor = ""
        # When the jobs whose tokens are reserved for later may start (set by start_ready).
        self.reserved_starts: list[datetime] = []
        # When the jobs whose reservation moved their start_at were ready before: their
        # wait counts from then (kept for the pass; a new leader counts from start_at).
        self.ready_at: dict[str, datetime] = {}

    def read_limits(self, changed: int | None) -> None:
        """Take in a runtime change of ``MAX_CONCURRENCY`` (``LoopState.max_concurrency``,
        read by the step's renewal): once per step."""
        self.max_concurrency = environment_limit(changed, read=False)

    def wakes(self) -> list[datetime]:
        """When a resting loop must look again for the sake of dispatch."""
        return [*self.rate_limited_until.values(), *self.reserved_starts]

    def grant_resumes(self, running: list[Attempt]) -> bool:
        """Give slots back to attempts that waited on a subtask, before anything new starts."""
        resuming = [a for a in running if a.wait == Wait.RESUMING]
        if not resuming:
            return False
        own_limits = dict(
            Job.objects.filter(pk__in=[a.job_id for a in resuming]).values_list(
                "pk", "max_concurrency"
            )
        )
        environment = sum(a.holds_environment_slot for a in running)
        per_queue = Counter(a.queue for a in running if a.holds_queue_slot)
        per_copy = copies_in_use(running)
        granted = []
        for attempt in resuming:
            needs_queue_slot = not attempt.holds_queue_slot
            limits = QueueLimits.of(attempt.queue, environment=self.max_concurrency)
            copy = (attempt.queue, attempt.concurrency_key)
            if environment >= self.max_concurrency or (
                needs_queue_slot
                and (
                    per_copy[copy] >= limits.limit_for(own_limits.get(attempt.job_id))
                    or per_queue[attempt.queue] >= (limits.total_concurrency or math.inf)
                )
            ):
                continue
            environment += 1
            per_queue[attempt.queue] += needs_queue_slot
            per_copy[copy] += needs_queue_slot
            attempt.wait, attempt.wait_queue = Wait.NONE, ""
            granted.append(attempt.pk)
        Attempt.objects.filter(pk__in=granted, wait=Wait.RESUMING).resume()
        return bool(granted)

    def start_ready(
        self, running: list[Attempt], now: datetime, tally: Tally
    ) -> tuple[list[Attempt], bool]:
        """Start what the limits allow; returns (the new attempts, WAITING jobs remain).
        Each start counts in ``tally`` as ``started``, with its wait and spent tokens.

        Each queue offers its jobs in rounds over its concurrency keys (see
        :meth:`queue_candidates`); the offers of all queues are taken by priority, then
        round, then the queues' turn (from the one after the queue served last), so a
        higher priority goes first and keys and queues of equal priority take turns.
        """
        self.reserved_starts = []
        if self.key_cursors is None:  # once per pass: only one pass runs at a time
            state = LoopState.objects.filter(pk=LoopState.SINGLETON)
            self.key_cursors, self.queue_cursor = state.values_list(
                "key_cursors", "queue_cursor"
            ).first() or ({}, "")
        queues = waiting_queues(after=self.queue_cursor)
        if not queues:
            return [], False
        env_free = self.max_concurrency - sum(a.holds_environment_slot for a in running)
        if env_free <= 0:
            return [], True
        per_queue = Counter(a.queue for a in running if a.holds_queue_slot)
        per_copy = copies_in_use(running)
        overrides = queue_overrides()
        cursors = self.key_cursors or {}
        offers: list[tuple[Job, int, int]] = []
        for turn, name in enumerate(queues):
            limits = QueueLimits.of(name, overrides, self.max_concurrency)
            offers.extend(
                (job, round_, turn)
                for job, round_ in self.queue_candidates(
                    name, limits, cursors.get(name), per_queue, per_copy, env_free, now, tally
                )
            )
        offers.sort(key=lambda offer: (-offer[0].priority, offer[1], offer[2]))
        chosen = [job for job, _round, _turn in offers[:env_free]]
        self.remember_turns(chosen, queues)
        if not chosen:
            return [], True
        for job in chosen:
            tally.count(job.queue, "started")
            tally.wait(job.queue, self.ready_at.pop(job.pk, job.start_at))
            if job.tokens_reserved:
                tally.count(job.queue, "tokens_spent", job.cost)
        # Written without reading their ids back: runners claim them by query.
        attempts = [
            Attempt(
                job_id=job.pk,
                number=job.attempts + 1,
                queue=job.queue,
                concurrency_key=job.concurrency_key,
                timeout=job.timeout,
                dispatched_at=now,
                remote=is_remote(job.queue, self.settings),
            )
            for job in chosen
        ]
        insert_rows(Attempt, attempts)
        Job.objects.filter(pk__in=[job.pk for job in chosen]).start()
        return attempts, len(offers) > len(chosen) or len(chosen) == env_free or bool(
            self.reserved_starts
        )

    def remember_turns(self, chosen: list[Job], queues: list[str]) -> None:
        """Keep where the next step's turns begin, in one UPDATE when they moved: per queue
        after the key served last, and over the queues after the queue served last (or
        after the last one looked at when none could start anything, so that each queue
        gets its turn however many have work)."""
        cursors = self.key_cursors or {}
        keys = {**cursors, **{job.queue: job.concurrency_key for job in chosen}}
        queue = self.queue_cursor
        if chosen:
            queue = chosen[-1].queue
        elif len(queues) == QUEUES_PER_STEP:
            queue = queues[-1]
        moved: dict[str, Any] = {}
        if keys != cursors:
            moved["key_cursors"] = keys
        if queue != self.queue_cursor:
            moved["queue_cursor"] = queue
        if moved:
            LoopState.objects.filter(pk=LoopState.SINGLETON).update(**moved)
            self.key_cursors, self.queue_cursor = keys, queue

    def queue_candidates(
        self,
        name: str,
        limits: QueueLimits,
        cursor: str | None,
        per_queue: Counter[str],
        per_copy: Counter[tuple[str, str]],
        env_free: int,
        now: datetime,
        tally: Tally,
    ) -> list[tuple[Job, int]]:
        """The jobs queue ``name`` can start now, each with its round: the keys with work
        ready are visited in turn from ``cursor`` on, and round n offers each key's n-th
        next job (in the order of READY_ORDER), so every key gets a start before any key
        gets two. Each key is its own copy of the queue, under ``max_concurrency``; jobs
        without a key share the copy ``""``; ``total_concurrency`` caps them together."""
        if limits.max_concurrency == 0:
            return []
        if name in self.rate_limited_until and self.rate_limited_until[name] > now:
            return []
        total = limits.total_concurrency or math.inf  # None: no cap over the keys
        room = env_free if total == math.inf else min(int(total) - per_queue[name], env_free)
        if room <= 0:
            return []
        keys = keys_in_turn(name, cursor, room + KEY_LOOKAHEAD)
        per_key_limit = limits.max_concurrency or self.settings.MAX_QUEUE_CONCURRENCY
        takes = {key: min(room, per_key_limit - per_copy[(name, key)]) for key in keys}
        turn = {key: position for position, key in enumerate(keys)}
        jobs = next_jobs(name, takes)
        jobs.sort(key=lambda job: (turn[job.concurrency_key], ready_key(job)))
        taken: Counter[str] = Counter()
        rounds: dict[str, int] = {}
        for job in jobs:
            rounds[job.pk] = taken[job.concurrency_key]
            taken[job.concurrency_key] += 1
        jobs.sort(key=lambda job: (-job.priority, rounds[job.pk], turn[job.concurrency_key]))
        chosen: list[tuple[Job, int]] = []
        for job in jobs:
            if per_queue[name] >= total or len(chosen) >= env_free:
                break
            copy = (name, job.concurrency_key)
            if per_copy[copy] >= limits.limit_for(job.max_concurrency):
                continue
            gate: TokenGate = "now"
            if limits.rate_limit:
                gate = isolated(
                    job,
                    now,
                    partial(self.reserve_tokens, name, limits.rate_limit, job, now, tally),
                    "unfit",
                    tally,
                )
                if gate == "parked":
                    break
                if gate == "unfit":
                    continue
            # A job whose tokens are reserved for later holds its slots until then.
            per_queue[name] += 1
            per_copy[copy] += 1
            if gate == "now":
                chosen.append((job, rounds[job.pk]))
        return chosen

    def reserve_tokens(
        self, queue: str, limit_name: str, job: Job, now: datetime, tally: Tally
    ) -> TokenGate:
        """Reserve a job's ``cost`` from its queue's rate limit once, in this step's
        transaction; "now" when the reservation says it may start at the step's ``now``,
        "later" when not yet. A refusal ("parked": ``max_reserved`` is reached) parks the
        queue until ``retry_at``; a cost the limit can never grant ("unfit": the settings
        changed since the enqueue, which checks it) fails the job."""
        if job.cost == 0:
            return "now"
        if not job.tokens_reserved:
            try:
                decision = rate_limit(limit_name, count=job.cost, reserve=True)
            except ValueError as error:
                fail_job(
                    job, f"Its cost cannot be reserved from {limit_name!r}: {error}", now, tally
                )
                return "unfit"
            if not decision.ok:
                self.rate_limited_until[queue] = decision.retry_at or now + timedelta(seconds=1)
                return "parked"
            job.tokens_reserved = True
            tally.count(queue, "tokens_reserved", job.cost)
            if decision.retry_at is not None and decision.retry_at > job.start_at:
                if len(self.ready_at) >= READY_AT_KEPT:  # canceled reserved jobs' leftovers
                    self.ready_at.clear()
                self.ready_at.setdefault(job.pk, job.start_at)
                job.start_at = decision.retry_at
            Job.objects.filter(pk=job.pk).reserve(job.start_at)
        if job.start_at > now:
            self.reserved_starts.append(job.start_at)
            return "later"
        return "now"


def is_remote(queue: str, settings: RateQueueSettings) -> bool:
    """Whether only remote workers serve ``queue`` (``"remote": True``)."""
    config = settings.QUEUES.get(queue)
    return config is not None and config.remote


def copies_in_use(running: list[Attempt]) -> Counter[tuple[str, str]]:
    """The slots held per copy of a queue: (queue, concurrency key), the key "" for jobs
    without one."""
    return Counter((a.queue, a.concurrency_key) for a in running if a.holds_queue_slot)


def waiting_queues(after: str = "") -> list[str]:
    """Up to QUEUES_PER_STEP queues that have WAITING jobs, in turns: the queues after
    ``after`` by name, then from the first one on. Found by skipping through the dispatch
    index (one index probe per queue, however many jobs wait), both ranges in one
    statement."""
    table = queue_connection().ops.quote_name(Job._meta.db_table)
    waiting = f"status = '{Status.WAITING.value}'"
    sql = (
        f"WITH RECURSIVE q(name) AS ("
        f" SELECT MIN(queue) FROM {table} WHERE {waiting} AND queue > %s"
        f" UNION ALL"
        f" SELECT (SELECT MIN(queue) FROM {table} WHERE {waiting} AND queue > q.name)"
        f" FROM q WHERE q.name IS NOT NULL"
        f"), w(name) AS ("  # the wrap-around: from the first queue up to ``after``
        f" SELECT MIN(queue) FROM {table} WHERE {waiting} AND queue <= %s"
        f" UNION ALL"
        f" SELECT (SELECT MIN(queue) FROM {table} WHERE {waiting} AND queue > w.name"
        f" AND queue <= %s) FROM w WHERE w.name IS NOT NULL"
        f") SELECT * FROM (SELECT 1 AS part, name FROM q WHERE name IS NOT NULL LIMIT %s) AS a"
        f" UNION ALL"
        f" SELECT * FROM (SELECT 2 AS part, name FROM w WHERE name IS NOT NULL LIMIT %s) AS b"
        f" ORDER BY part, name"
    )
    wrap = QUEUES_PER_STEP if after else 0
    statement = server_statement("ratequeue_waiting_queues", sql)
    rows = execute(queue_connection(), statement, [after, after, after, QUEUES_PER_STEP, wrap])
    return [name for _part, name in rows][:QUEUES_PER_STEP]

"""Dispatch: start the WAITING jobs the limits allow, in turns over queues and keys.

Per step, :class:`Dispatch` gives resuming subtask waits their places back, picks jobs by
priority, round over the keys and the queues' turn (:mod:`.keys` reads the candidates,
:mod:`.turns` keeps where the turns begin), reserves their cost from a queue's rate
limit, and creates their attempts for runners to claim. docs/concepts.md tells why.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from typing import Literal

from ..conf import RateQueueSettings
from ..db import execute, server_statement
from ..ratelimit.decisions import rate_limit
from .bulk import insert_rows
from .capacity import Capacity, rate_keyed, rate_row
from .keys import keys_in_turn, next_jobs, ready_key
from .keyshares import KeyLimits, weighted_rounds
from .limits import environment_limit
from .models import (
    Attempt,
    Job,
    Status,
    Wait,
    queue_connection,
)
from .moves import Moves
from .skipscan import distinct_values
from .transitions import fail_job, isolated
from .turns import QUEUES_PER_STEP, Turns

# Concurrency keys looked at per queue beyond its free places, to get past busy keys.
KEY_LOOKAHEAD = 100
# What a rate-gated queue's reservation says about a job (see Dispatch.reserve_tokens).
TokenGate = Literal["now", "later", "parked", "held", "unfit"]
# The most ready times of reserved jobs kept (Dispatch.ready_at); beyond, they are forgotten.
READY_AT_KEPT = 100_000


class Dispatch:
    """Start jobs, step after step of one pass, remembering what the next step needs."""

    def __init__(self, settings: RateQueueSettings) -> None:
        self.settings = settings
        # The keys' own limits, kept across steps (queue/keyshares.py).
        self.keys = KeyLimits()
        # The limits as in force for this step and the places held (read_limits).
        self.capacity = Capacity(settings.MAX_CONCURRENCY, self.keys)
        self.turns = Turns()
        # The credit a job's key has left in its weighted turn once the job starts.
        self.credit_left: dict[str, int] = {}
        # Queues whose rate limit refused a start, and when to try again.
        self.rate_limited_until: dict[str, datetime] = {}
        # The same per (queue, concurrency key), for a queue whose limit is keyed (plan
        # tiers): one key's refusal holds back that key only.
        self.keys_rate_limited_until: dict[tuple[str, str], datetime] = {}
        # When the jobs whose tokens are reserved for later may start (set by start_ready).
        self.reserved_starts: list[datetime] = []
        # When the jobs whose reservation moved their start_at were ready before: their
        # wait counts from then (kept for the pass; a new leader counts from start_at).
        self.ready_at: dict[str, datetime] = {}

    @property
    def max_concurrency(self) -> int:
        """``MAX_CONCURRENCY`` as in force for this step."""
        return self.capacity.environment

    def read_limits(self, changed: int | None, key_limits_version: int | None = None) -> None:
        """Take the queues' limits afresh for a step, once per step.

        ``changed`` is the runtime change of ``MAX_CONCURRENCY`` that the step's renewal
        read (``LoopState.max_concurrency``); the queues' runtime changes are read when
        the step first needs them, the keys' when they moved (``key_limits_version``)."""
        self.keys.watch(key_limits_version)
        self.capacity = Capacity(environment_limit(changed, read=False), self.keys)

    def wakes(self) -> list[datetime]:
        """Return when a resting loop must look again for the sake of dispatch."""
        return [
            *self.rate_limited_until.values(),
            *self.keys_rate_limited_until.values(),
            *self.reserved_starts,
        ]

    def grant_resumes(self, running: list[Attempt]) -> bool:
        """Give places back to attempts that waited on a subtask, before anything new starts."""
        resuming = [a for a in running if a.wait == Wait.RESUMING]
        if not resuming:
            return False
        own_limits = dict(
            Job.objects.filter(pk__in=[a.job_id for a in resuming]).values_list(
                "pk", "max_concurrency"
            )
        )
        capacity = self.capacity
        places = capacity.hold(running)
        granted = []
        for attempt in resuming:
            needs_queue_slot = not attempt.holds_queue_slot
            queue, key = attempt.queue, attempt.concurrency_key
            own = own_limits.get(attempt.job_id)
            if capacity.environment_free() <= 0 or (
                needs_queue_slot
                and (capacity.copy_full(queue, key, own) or capacity.queue_full(queue))
            ):
                continue
            places.environment += 1
            if needs_queue_slot:
                capacity.take(queue, key)
            attempt.wait, attempt.wait_queue = Wait.NONE, ""
            granted.append(attempt.pk)
        Attempt.objects.filter(pk__in=granted, wait=Wait.RESUMING).resume()
        return bool(granted)

    def start_ready(
        self, running: list[Attempt], now: datetime, moves: Moves
    ) -> tuple[list[Attempt], bool]:
        """Start what the limits allow; return (the new attempts, WAITING jobs remain).

        Each queue offers its jobs in rounds over its concurrency keys (see
        :meth:`queue_candidates`); the offers of all queues are taken by priority, then
        round, then the queues' turn (from the one after the queue served last), so a
        higher priority goes first and keys and queues of equal priority take turns.
        Each start is recorded in ``moves`` with the time its job was ready since.
        """
        self.reserved_starts = []
        self.credit_left = {}
        self.turns.load()
        queues = waiting_queues(after=self.turns.queue)
        if not queues:
            return [], False
        self.capacity.hold(running)
        env_free = self.capacity.environment_free()
        if env_free <= 0:
            return [], True
        offers: list[tuple[Job, int, int]] = []
        for turn, name in enumerate(queues):
            offers.extend(
                (job, round_, turn) for job, round_ in self.queue_candidates(name, now, moves)
            )
        offers.sort(key=lambda offer: (-offer[0].priority, offer[1], offer[2]))
        chosen = [job for job, _round, _turn in offers[:env_free]]
        credits = {job.queue: self.credit_left.get(job.pk, 0) for job in chosen}
        self.turns.remember(chosen, queues, credits)
        if not chosen:
            return [], True
        moves.started.extend((job, self.ready_at.pop(job.pk, job.start_at)) for job in chosen)
        attempts = self.create_attempts(chosen, now)
        more_waiting = len(offers) > len(chosen) or len(chosen) == env_free
        return attempts, more_waiting or bool(self.reserved_starts)

    def create_attempts(self, chosen: list[Job], now: datetime) -> list[Attempt]:
        """Create the attempts of the ``chosen`` jobs and mark the jobs started."""
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
        return attempts

    def queue_candidates(self, name: str, now: datetime, moves: Moves) -> list[tuple[Job, int]]:
        """Return the jobs queue ``name`` can start now, each with its round.

        The keys with work ready are visited in turn from the key served last on, and
        round n offers each key's n-th next job (in the order of READY_ORDER), so every
        key gets a start before any key gets two. Each key is its own copy of the queue,
        under ``max_concurrency``; jobs without a key share the copy ``""``;
        ``total_concurrency`` caps them together. The places offered are counted in
        the step's capacity."""
        capacity = self.capacity
        env_free = capacity.environment_free()
        room = self.room(name, now)
        if room <= 0:
            return []
        limits = capacity.limits(name)
        chosen: list[tuple[Job, int]] = []
        for job, round_ in self.in_rounds(name, room):
            if capacity.queue_full(name) or len(chosen) >= env_free:
                break
            if capacity.copy_full(name, job.concurrency_key, job.max_concurrency):
                continue
            gate: TokenGate = "now"
            if limits.rate_limit:
                reserve = partial(self.reserve_tokens, name, limits.rate_limit, job, now, moves)
                gate = isolated(job, now, reserve, "unfit", moves)
                if gate == "parked":
                    break
                if gate in ("held", "unfit"):
                    continue
            # A job whose tokens are reserved for later holds its places until then.
            capacity.take(name, job.concurrency_key)
            if gate == "now":
                chosen.append((job, round_))
        return chosen

    def room(self, name: str, now: datetime) -> int:
        """Return how many jobs queue ``name`` may start now, at most (0 or less: none).

        The capacity's room, none while its rate limit parks the queue."""
        if name in self.rate_limited_until and self.rate_limited_until[name] > now:
            return 0
        return self.capacity.room(name)

    def in_rounds(self, name: str, room: int) -> list[tuple[Job, int]]:
        """Return the next jobs of queue ``name``'s keys in weighted turns, with their round.

        They come by priority, then round, then the keys' turn: from the key served last
        when it has credit left in its turn, else from the one after it (see
        :func:`.keyshares.weighted_rounds`)."""
        cursor, credit = self.turns.key_of(name), self.turns.credit_of(name)
        keys = keys_in_turn(name, cursor, room + KEY_LOOKAHEAD)
        if cursor is not None and credit > 0:
            keys = [cursor, *(key for key in keys if key != cursor)]
        else:
            credit = 0
        by_key: dict[str, list[Job]] = {}
        for job in sorted(next_jobs(name, self.capacity.takes(name, keys, room)), key=ready_key):
            by_key.setdefault(job.concurrency_key, []).append(job)
        offers = weighted_rounds(keys, by_key, self.capacity.weights(name, keys), credit)
        self.credit_left.update((job.pk, left) for job, _round, left in offers)
        return [(job, round_) for job, round_, _left in offers]

    def reserve_tokens(
        self, queue: str, limit_name: str, job: Job, now: datetime, moves: Moves
    ) -> TokenGate:
        """Reserve a job's ``cost`` from its queue's rate limit once; say when it may start.

        The reservation is made in this step's transaction: "now" when it says the job
        may start at the step's ``now``, "later" when not yet. A refusal ("parked":
        ``max_reserved`` is reached) parks the queue until ``retry_at``; a cost the limit
        can never grant ("unfit": the settings changed since the enqueue, which checks
        it, or a keyed limit's function fails for the job's key) fails the job. A keyed
        limit draws from the job's concurrency key's own limit, and its refusal holds
        back that key only ("held")."""
        if job.cost == 0:
            return "now"
        if not job.tokens_reserved:
            keyed = rate_keyed(limit_name, self.settings)
            copy = (queue, job.concurrency_key)
            if keyed and self.key_held(copy, now):
                return "held"
            try:
                row = rate_row(limit_name, job.concurrency_key, self.settings)
                decision = rate_limit(limit_name, key=row, count=job.cost, reserve=True)
            except ValueError as error:
                fail_job(
                    job, f"Its cost cannot be reserved from {limit_name!r}: {error}", now, moves
                )
                return "unfit"
            if not decision.ok:
                return self.refused(copy, decision.retry_at or now + timedelta(seconds=1), keyed)
            job.tokens_reserved = True
            moves.reserved.append(job)
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

    def refused(self, copy: tuple[str, str], retry_at: datetime, keyed: bool) -> TokenGate:
        """Hold back ``copy``'s (queue, key) key, for a keyed limit, or park its queue.

        Until ``retry_at``, when the refusal says the same reservation could succeed."""
        if not keyed:
            self.rate_limited_until[copy[0]] = retry_at
            return "parked"
        if len(self.keys_rate_limited_until) >= READY_AT_KEPT:
            self.keys_rate_limited_until.clear()
        self.keys_rate_limited_until[copy] = retry_at
        return "held"

    def key_held(self, copy: tuple[str, str], now: datetime) -> bool:
        """Say whether a keyed rate limit refused ``copy`` (queue, key) until after ``now``."""
        until = self.keys_rate_limited_until.get(copy)
        if until is not None and until <= now:
            del self.keys_rate_limited_until[copy]
            return False
        return until is not None


def is_remote(queue: str, settings: RateQueueSettings) -> bool:
    """Return whether only remote workers serve ``queue`` (``"remote": True``)."""
    config = settings.QUEUES.get(queue)
    return config is not None and config.remote


def waiting_queues(after: str = "") -> list[str]:
    """Return up to QUEUES_PER_STEP queues that have WAITING jobs, in turns.

    The queues after ``after`` by name, then from the first one on: both ranges in one
    statement, each a skip scan of the dispatch index (one probe per queue, however many
    jobs wait)."""
    table = queue_connection().ops.quote_name(Job._meta.db_table)
    waiting = f"t.status = '{Status.WAITING.value}'"
    first = distinct_values("q", table, "queue", where=waiting, after="%s")
    wrapped = distinct_values("w", table, "queue", where=waiting, through="%s")  # up to after
    sql = (
        f"WITH RECURSIVE {first}, {wrapped}"
        f" SELECT * FROM (SELECT 1 AS part, queue FROM q WHERE queue IS NOT NULL LIMIT %s) AS a"
        f" UNION ALL"
        f" SELECT * FROM (SELECT 2 AS part, queue FROM w WHERE queue IS NOT NULL LIMIT %s) AS b"
        f" ORDER BY part, queue"
    )
    wrap = QUEUES_PER_STEP if after else 0
    statement = server_statement("ratequeue_waiting_queues", sql)
    rows = execute(queue_connection(), statement, [after, after, after, QUEUES_PER_STEP, wrap])
    return [name for _part, name in rows][:QUEUES_PER_STEP]

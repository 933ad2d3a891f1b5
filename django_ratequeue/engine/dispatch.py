"""Dispatch: start the WAITING jobs the limits allow, in turns over queues and keys.

Per step, :class:`Dispatch` gives resuming subtask waits their places back, picks jobs by
priority, round over the keys and the queues' turn (:mod:`.rounds`, under the step's
:mod:`.capacity`; :mod:`.turns` keeps where the turns begin), reserves their cost from a
queue's rate limit, and creates their attempts for runners to claim. docs/concepts.md tells why.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine.bulk import insert_rows
from django_ratequeue.engine.capacity import Capacity, rate_keyed, rate_row
from django_ratequeue.engine.fairness.shares import KeyLimits
from django_ratequeue.engine.fairness.turns import QUEUES_PER_STEP, Turns
from django_ratequeue.engine.lease import Renewal
from django_ratequeue.engine.limits import KnownOverrides, environment_limit
from django_ratequeue.engine.models import Attempt, Job, Wait
from django_ratequeue.engine.moves import Moves
from django_ratequeue.engine.rounds import Rounds, TokenGate, waiting_queues
from django_ratequeue.engine.transitions import expect_moved, fail_job, isolated
from django_ratequeue.ratelimit.decisions import rate_limit

__all__ = ["QUEUES_PER_STEP", "Dispatch", "is_remote", "waiting_queues"]

# The most ready times of reserved jobs kept (Dispatch.ready_at); beyond, they are forgotten.
READY_AT_KEPT = 100_000


class Dispatch:
    """Start jobs, step after step of one pass, remembering what the next step needs."""

    def __init__(self, settings: RateQueueSettings) -> None:
        self.settings = settings
        # The keys' own limits, kept across steps (engine/fairness/shares.py).
        self.keys = KeyLimits()
        # The queues' runtime changes, kept while their digest does not move.
        self.overrides = KnownOverrides()
        # The limits as in force for this step and the places held (read_limits).
        self.capacity = Capacity(settings.MAX_CONCURRENCY, self.keys)
        self.turns = Turns()
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

    def read_limits(self, renewal: Renewal) -> None:
        """Take the queues' limits afresh for a step, once per step.

        From what the step's renewal read: the runtime change of ``MAX_CONCURRENCY``;
        the digest of the queues' runtime changes, read again when it moved; and the
        keys' limits' version, which forgets the keys' limits read when it moved."""
        self.keys.watch(renewal.key_limits_version)
        self.capacity = Capacity(
            environment_limit(renewal.max_concurrency, read=False),
            self.keys,
            self.overrides.current(renewal.queue_settings),
        )

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
        self.capacity.hold(running)
        granted = self.capacity.resume(resuming)
        for attempt in granted:
            attempt.wait, attempt.wait_queue = Wait.NONE, ""
        Attempt.objects.filter(pk__in=[a.pk for a in granted], wait=Wait.RESUMING).resume()
        return bool(granted)

    def start_ready(
        self, running: list[Attempt], now: datetime, moves: Moves
    ) -> tuple[list[Attempt], bool]:
        """Start what the limits allow; return (the new attempts, WAITING jobs remain).

        The queues after the one served last offer their jobs in the dispatch's order
        (:class:`.rounds.Rounds`), their rate limits reserving as they go. Each start is
        recorded in ``moves`` with the time its job was ready since.
        """
        self.reserved_starts = []
        self.turns.load()
        queues = waiting_queues(after=self.turns.queue)
        if not queues:
            return [], False
        self.capacity.hold(running)
        env_free = self.capacity.environment_free()
        if env_free <= 0:
            return [], True
        rounds = Rounds(self.capacity, self.turns, partial(self.gate, now=now, moves=moves))
        offers = rounds.offers(queues, partial(self.room, now=now))
        chosen = offers.chosen
        credits = {job.queue: rounds.credit_left.get(job.pk, 0) for job in chosen}
        self.turns.remember(chosen, queues, credits)
        if not chosen:
            return [], True
        moves.started.extend((job, self.ready_at.pop(job.pk, job.start_at)) for job in chosen)
        attempts = self.create_attempts(chosen, now)
        more_waiting = offers.more or len(chosen) == env_free
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
        started = Job.objects.filter(pk__in=[job.pk for job in chosen]).start()
        expect_moved(started, chosen, "started")
        insert_rows(Attempt, attempts)
        return attempts

    def room(self, name: str, now: datetime) -> int:
        """Return how many jobs queue ``name`` may start now, at most (0 or less: none).

        The capacity's room, none while its rate limit parks the queue."""
        if name in self.rate_limited_until and self.rate_limited_until[name] > now:
            return 0
        return self.capacity.room(name)

    def gate(
        self, queue: str, limit_name: str, job: Job, now: datetime, moves: Moves
    ) -> TokenGate:
        """Reserve ``job``'s tokens (:meth:`reserve_tokens`), failing the job should it raise."""
        reserve = partial(self.reserve_tokens, queue, limit_name, job, now, moves)
        return isolated(job, now, reserve, "unfit", moves)

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
                self.postpone(job, decision.retry_at)
            reserved = Job.objects.filter(pk=job.pk).reserve(job.start_at)
            expect_moved(reserved, [job], "reserved the cost of")
        if job.start_at > now:
            self.reserved_starts.append(job.start_at)
            return "later"
        return "now"

    def postpone(self, job: Job, start_at: datetime) -> None:
        """Move ``job``'s start to ``start_at``, when its tokens are there; its own start is
        kept in ``ready_at``."""
        if len(self.ready_at) >= READY_AT_KEPT:  # canceled reserved jobs' leftovers
            self.ready_at.clear()
        self.ready_at.setdefault(job.pk, job.start_at)
        job.start_at = start_at

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

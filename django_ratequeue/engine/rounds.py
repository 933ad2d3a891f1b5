"""The order the dispatch starts waiting jobs in, under one :class:`~.capacity.Capacity`.

:class:`Rounds` offers each queue's jobs in weighted rounds over its concurrency keys
and takes the offers of all queues by priority, round, then the queues' turn. The
dispatch runs it with the rate limits' real reservations to start jobs; :mod:`.eta`
runs it with simulated ones to tell which jobs the next step starts, so that what eta
promises is what the dispatch does. docs/concepts.md tells why the order is so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from django_ratequeue.db import execute, server_statement
from django_ratequeue.engine.capacity import Capacity, rate_keyed, rate_row
from django_ratequeue.engine.fairness.keys import keys_in_turn, next_jobs, ready_key
from django_ratequeue.engine.fairness.shares import weighted_rounds
from django_ratequeue.engine.fairness.turns import QUEUES_PER_STEP, Turns
from django_ratequeue.engine.models import Attempt, Job, Status, Wait, queue_connection
from django_ratequeue.engine.skipscan import distinct_values
from django_ratequeue.engine.tokens import Tokens

# Concurrency keys looked at per queue beyond its free places, to get past busy keys.
KEY_LOOKAHEAD = 100
# The most queues whose jobs one read of the rounds takes (Rounds.read): as many as the
# environment has places, at least 10 (some may have nothing to start).
QUEUES_PER_READ = 100
# What a rate-gated queue's reservation says about a job (see Dispatch.reserve_tokens):
# start "now", its place kept till "later", its queue "parked", its key "held", "unfit".
TokenGate = Literal["now", "later", "parked", "held", "unfit"]
# Ask a rate-gated queue's limit about a job: (queue, rate limit's name, job) -> gate.
Gate = Callable[[str, str, Job], TokenGate]


@dataclass
class Offers:
    """What one step starts: the jobs ``chosen`` now, those given a place ``later``
    (their tokens reserved for later), and whether more were offered than chosen."""

    chosen: list[Job] = field(default_factory=list)
    later: list[Job] = field(default_factory=list)
    more: bool = False


class Rounds:
    """Offer waiting jobs in the dispatch's order, counting their places in ``capacity``."""

    def __init__(self, capacity: Capacity, turns: Turns, gate: Gate) -> None:
        self.capacity = capacity
        self.turns = turns
        self.gate = gate
        # The credit a job's key has left in its weighted turn once the job starts.
        self.credit_left: dict[str, int] = {}

    def offers(self, queues: list[str], room: Callable[[str], int]) -> Offers:
        """Return what ``queues`` (in turn) start, each queue at most ``room(queue)``.

        The offers of all queues are taken by priority, then round, then the queues'
        turn, so a higher priority goes first and keys and queues of equal priority take
        turns; as many as the environment has places. The queues' jobs are read a chunk
        of queues at a time (:meth:`read`), as long as places are left."""
        env_free = self.capacity.environment_free()
        result = Offers()
        if env_free <= 0:
            return result
        offers: list[tuple[Job, int, int]] = []
        turn = 0
        while turn < len(queues) and (places := self.capacity.environment_free()) > 0:
            chunk = queues[turn : turn + min(max(places, 10), QUEUES_PER_READ)]
            waiting = self.read(chunk, room)
            for name in chunk:
                jobs = waiting.get(name, [])
                offers.extend(
                    (job, round_, turn)
                    for job, round_ in self.candidates(name, room(name), jobs, result)
                )
                turn += 1
        offers.sort(key=lambda offer: (-offer[0].priority, offer[1], offer[2]))
        result.chosen = [job for job, _round, _turn in offers[:env_free]]
        result.more = len(offers) > len(result.chosen)
        return result

    def candidates(
        self, name: str, room: int, jobs: list[tuple[Job, int]], result: Offers
    ) -> list[tuple[Job, int]]:
        """Return the jobs of queue ``name`` (its ``jobs`` in rounds) it can start now.

        Each key is its own copy of the queue, under its limit; ``total_concurrency``
        caps them together. A job its rate limit gives a place later joins
        ``result.later``. The places offered are counted in the capacity."""
        capacity = self.capacity
        env_free = capacity.environment_free()
        if room <= 0:
            return []
        rate_limit = capacity.limits(name).rate_limit
        chosen: list[tuple[Job, int]] = []
        for job, round_ in jobs:
            if capacity.queue_full(name) or len(chosen) >= env_free:
                break
            if capacity.copy_full(name, job.concurrency_key, job.max_concurrency):
                continue
            gate: TokenGate = self.gate(name, rate_limit, job) if rate_limit else "now"
            if gate == "parked":
                break
            if gate in ("held", "unfit"):
                continue
            # A job whose tokens are reserved for later holds its places until then.
            capacity.take(name, job.concurrency_key)
            if gate == "now":
                chosen.append((job, round_))
            else:
                result.later.append(job)
        return chosen

    def read(
        self, queues: list[str], room: Callable[[str], int]
    ) -> dict[str, list[tuple[Job, int]]]:
        """Return the next jobs of each of ``queues``' keys in weighted turns, with their round.

        Per queue they come by priority, then round, then the keys' turn: from the key
        served last when it has credit left in its turn, else from the one after it (see
        :func:`.keyshares.weighted_rounds`). Two statements for all the queues: their keys
        in turn, then the keys' next jobs, as many as each queue has room for."""
        rooms = {name: places for name in queues if (places := room(name)) > 0}
        cursors = {name: self.turns.key_of(name) for name in rooms}
        found = keys_in_turn(
            {name: (cursors[name], places + KEY_LOOKAHEAD) for name, places in rooms.items()}
        )
        turns: dict[str, tuple[list[str], int]] = {}
        takes: dict[tuple[str, str], int] = {}
        for name, places in rooms.items():
            keys, cursor, credit = found[name], cursors[name], self.turns.credit_of(name)
            if cursor is not None and credit > 0:
                keys = [cursor, *(key for key in keys if key != cursor)]
            else:
                credit = 0
            turns[name] = (keys, credit)
            for key, take in self.capacity.takes(name, keys, places).items():
                takes[(name, key)] = take
        by_key: dict[str, dict[str, list[Job]]] = {name: {} for name in rooms}
        for job in sorted(next_jobs(takes), key=ready_key):
            by_key[job.queue].setdefault(job.concurrency_key, []).append(job)
        waiting = {}
        for name, (keys, credit) in turns.items():
            weights = self.capacity.weights(name, keys)
            offers = weighted_rounds(keys, by_key[name], weights, credit)
            self.credit_left.update((job.pk, left) for job, _round, left in offers)
            waiting[name] = [(job, round_) for job, round_, _left in offers]
        return waiting


class NextStep:
    """Which waiting jobs the dispatch's next step gives a place, by its own rounds.

    Run over a fork of ``capacity`` (its places held by the ``running`` attempts, and
    given back first to those resuming from a subtask wait) from where the turns begin,
    with the reservations simulated on ``tokens``: a job's tokens are there now when its
    rate limit holds them on top of what the jobs before it in the step draw, else it
    keeps its place for later; past ``max_reserved`` its key is held (a keyed limit) or
    its queue parked. A leader's memory of the refusals of its earlier steps is not
    known here."""

    def __init__(self, capacity: Capacity, tokens: Tokens, running: list[Attempt]) -> None:
        self.now, self.tokens = tokens.now, tokens
        self.drawn: Counter[tuple[str, str | None]] = Counter()
        self.held: set[tuple[str, str]] = set()
        # When each job given a place starts: now, or when its tokens are there.
        self.starts: dict[str, datetime] = {}
        turns = Turns()
        turns.load()
        capacity = capacity.fork()
        capacity.resume([a for a in running if a.wait == Wait.RESUMING])  # first, as the loop
        rounds = Rounds(capacity, turns, self.gate)
        offers = rounds.offers(waiting_queues(after=turns.queue), capacity.room)
        placed = [*offers.chosen, *offers.later]
        self.starts.update((job.pk, self.now) for job in offers.chosen)
        self.placed = {job.pk for job in placed}
        self.per_copy = Counter((job.queue, job.concurrency_key) for job in placed)

    def gate(self, queue: str, limit_name: str, job: Job) -> TokenGate:
        """Say what reserving ``job``'s tokens would, as Dispatch.reserve_tokens does."""
        if job.cost == 0:
            return "now"
        at = job.start_at
        if not job.tokens_reserved:
            copy, key = (queue, job.concurrency_key), job.concurrency_key
            if copy in self.held:
                return "held"
            row = (limit_name, rate_row(limit_name, key))
            needed = self.drawn[row] + job.cost
            if self.tokens.refused(limit_name, key, needed):
                if not rate_keyed(limit_name):
                    return "parked"
                self.held.add(copy)
                return "held"
            self.drawn[row] = needed
            reserved_at = self.tokens.at(limit_name, key, needed)
            if reserved_at is None:
                return "unfit"
            at = max(at, reserved_at)
        if at <= self.now:
            return "now"
        self.starts[job.pk] = at
        return "later"


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

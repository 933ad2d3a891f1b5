"""Where the loop's turns over the queues and over each queue's keys begin."""

from __future__ import annotations

from typing import Any

from django_ratequeue.engine.fairness.models import TurnState
from django_ratequeue.engine.models import Job

# Queues with waiting work looked at per step, in turns from TurnState.queue_cursor.
QUEUES_PER_STEP = 1000


class Turns:
    """Remember the queue served last and, per queue, the concurrency key served last.

    Kept in ``TurnState`` (``queue_cursor``, ``key_cursors``, ``key_credits``) so that a
    new leader goes on where the last one stopped; read once per pass, since one pass
    runs at a time."""

    def __init__(self) -> None:
        self.keys: dict[str, str] | None = None
        self.credits: dict[str, int] = {}
        self.queue = ""

    def load(self) -> None:
        """Read where the turns begin, once per pass."""
        if self.keys is not None:
            return
        state = TurnState.objects.filter(pk=TurnState.SINGLETON)
        read = state.values_list("key_cursors", "queue_cursor", "key_credits").first()
        self.keys, self.queue, self.credits = read or ({}, "", {})

    def key_of(self, queue: str) -> str | None:
        """Return the key of ``queue`` served last (None: none yet)."""
        return (self.keys or {}).get(queue)

    def credit_of(self, queue: str) -> int:
        """Return the starts left to the key of ``queue`` served last in its weighted turn."""
        credit = self.credits.get(queue, 0)
        return credit if type(credit) is int else 0

    def remember(
        self, chosen: list[Job], queues: list[str], credits: dict[str, int] | None = None
    ) -> None:
        """Keep where the next step's turns begin, in one UPSERT when they moved.

        Per queue at the key served last if ``credits`` leaves it starts in its weighted
        turn, else after it; over the queues after the queue served last (or after the
        last one looked at when none could start anything, so that each queue gets its
        turn however many have work)."""
        cursors = self.keys or {}
        keys = {**cursors, **{job.queue: job.concurrency_key for job in chosen}}
        left = {**self.credits, **(credits or {})}
        left = {queue: credit for queue, credit in left.items() if credit}
        queue = self.queue
        if chosen:
            queue = chosen[-1].queue
        elif len(queues) == QUEUES_PER_STEP:
            queue = queues[-1]
        moved: dict[str, Any] = {}
        if keys != cursors:
            moved["key_cursors"] = keys
        if left != self.credits:
            moved["key_credits"] = left
        if queue != self.queue:
            moved["queue_cursor"] = queue
        if moved:
            row = TurnState(pk=TurnState.SINGLETON, key_cursors=keys, queue_cursor=queue)
            row.key_credits = left
            TurnState.objects.bulk_create(
                [row], update_conflicts=True, unique_fields=["id"], update_fields=list(moved)
            )
            self.keys, self.queue, self.credits = keys, queue, left

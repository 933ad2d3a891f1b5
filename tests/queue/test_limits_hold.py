"""Every limit holds while many runners race: counted from the attempts' rows.

Two clusters (two hosts) of four worker processes each take jobs from five queues at once:
one capped with mixed priorities, one keyed under a total, one with weighted keys, one
gated by a rate limit, and one free. Whatever the start path, what the rows record must
show no instant above any limit, the priorities' order within a queue, the weights'
shares, and the rate limit's budget.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from itertools import pairwise
from typing import Any

from django_ratequeue import Status, enqueue, enqueue_many, set_key_limit
from django_ratequeue.models import Attempt, Job
from tests.cluster import Cluster, wait_for
from tests.queue import jobs

QUEUES = {
    "capped": {"max_concurrency": 3},
    "keyed": {"max_concurrency": 2, "total_concurrency": 5},
    "weighted": {"max_concurrency": 4, "total_concurrency": 4},
    "gated": {"max_concurrency": 10, "rate_limit": "budget"},
    "free": {"max_concurrency": 50},
}
RATE, BUCKET = 40.0, 10  # the gated queue's budget: 40 starts a second, 10 at once
WEIGHTS = {"w1": 1, "w2": 2, "w4": 4}
# Enough that the lighter keys are still backlogged when "w4" runs out (its 280 starts
# come with about 70 and 140 of theirs), and that one round more or less is within 5%.
BACKLOG = {"w1": 100, "w2": 180, "w4": 280}
SECONDS = 0.02  # each job's length


def most_at_once(spans: Iterable[tuple[datetime, datetime]]) -> int:
    """Return the most spans open at one instant (one that ends as another starts: apart)."""
    edges = sorted(e for start, end in spans for e in ((start, 1), (end, -1)))
    open_, most = 0, 0
    for _moment, change in edges:  # at equal moments the end (-1) sorts first
        open_ += change
        most = max(most, open_)
    return most


def held_until(attempt: Attempt) -> datetime:
    """Return when the step that took the attempt's end in ran (its job's finish)."""
    assert attempt.job.finished_at is not None
    return attempt.job.finished_at


def enqueue_the_mix() -> int:
    """Enqueue every queue's jobs before any runner is up; return how many."""
    rng = random.Random(32)
    total = 0
    for _ in range(60):  # mixed priorities, in no order
        enqueue(jobs.sleep, args=[SECONDS], queue="capped", priority=rng.randrange(4))
        total += 1
    for key in ("k0", "k1", "k2", "k3"):
        total += len(
            enqueue_many(jobs.sleep, [[SECONDS]] * 20, queue="keyed", concurrency_key=key)
        )
    for key, weight in WEIGHTS.items():
        set_key_limit("weighted", key, weight=weight)
        params = [[SECONDS]] * BACKLOG[key]
        total += len(enqueue_many(jobs.sleep, params, queue="weighted", concurrency_key=key))
    total += len(enqueue_many(jobs.add, [[1, 2]] * 100, queue="gated"))
    total += len(enqueue_many(jobs.add, [[1, 2]] * 100, queue="free"))
    return total


def test_every_limit_holds_while_eight_runners_race(
    cluster: Callable[..., Cluster], settings: Any
) -> None:
    options = {
        "SLOTS": 4,
        "QUEUES": QUEUES,
        "RATE_LIMITS": {
            "budget": {"kind": "token bucket", "rate": RATE, "period": 1, "capacity": BUCKET}
        },
    }
    settings.RATEQUEUE = {**settings.RATEQUEUE, **options}
    total = enqueue_the_mix()  # all waiting before the first runner is up
    cluster(workers=4, wait=False, **options)
    cluster(workers=4, wait=False, **options)
    wait_for(
        lambda: Job.objects.filter(status=Status.COMPLETE).count() == total,
        timeout=180,
        message=f"all {total} jobs to complete",
    )
    attempts = list(Attempt.objects.select_related("job"))
    assert len(attempts) == total  # none ran twice
    assert len({a.worker for a in attempts}) > 2  # many runners took part

    def spans(queue: str, key: str | None = None) -> list[tuple[datetime, datetime]]:
        # A place is held from the step that dispatched the attempt to the one that took
        # its end in, both on the leader's clock (a runner's started_at is on its own
        # host's clock, and on PostgreSQL taken just before its claim's statement).
        return [
            (a.dispatched_at, held_until(a))
            for a in attempts
            if a.queue == queue and (key is None or a.concurrency_key == key)
        ]

    # No instant above a queue's limit, a key's limit, or a total.
    assert most_at_once(spans("capped")) <= 3
    for key in ("k0", "k1", "k2", "k3"):
        assert most_at_once(spans("keyed", key)) <= 2
    assert most_at_once(spans("keyed")) <= 5
    assert most_at_once(spans("weighted")) <= 4
    assert most_at_once(spans("gated")) <= 10

    # Within a queue, a higher priority starts first: every step's starts outrank the
    # later steps' (all were waiting before the first step).
    by_step: dict[datetime, list[int]] = {}
    for a in sorted(attempts, key=lambda a: a.dispatched_at):
        if a.queue == "capped":
            by_step.setdefault(a.dispatched_at, []).append(a.job.priority)
    steps = list(by_step.values())
    for earlier, later in pairwise(steps):
        assert min(earlier) >= max(later), steps

    # While every weighted key is backlogged, each gets its weight's share of the starts.
    weighted = sorted((a for a in attempts if a.queue == "weighted"), key=lambda a: a.pk)
    first_out = min(
        max(i for i, a in enumerate(weighted) if a.concurrency_key == k) for k in WEIGHTS
    )
    shares = Counter(a.concurrency_key for a in weighted[: first_out + 1])
    counted = sum(shares.values())
    for key, weight in WEIGHTS.items():
        expected = weight / sum(WEIGHTS.values())
        assert abs(shares[key] / counted - expected) <= 0.05 * expected, (shares, counted)

    # The gated queue never starts more than its budget allows over any interval (the
    # slack: a step's clock against the limit's, and the step's own length).
    starts = sorted(a.dispatched_at for a in attempts if a.queue == "gated")
    for i, first in enumerate(starts):
        for n, moment in enumerate(starts[i:], start=1):
            allowed = BUCKET + RATE * ((moment - first).total_seconds() + 0.25)
            assert n <= allowed, (first, moment, n, allowed)

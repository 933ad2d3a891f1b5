"""Weighted turns over concurrency keys, checked against the rule itself: with every key
backlogged, the starts follow deficit round robin, so the shares converge to the weights
and no key waits longer than one round. Once on the ordering alone (many cases), once
with the loop in this process (the real cursors and credits in LoopState)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from django_ratequeue import set_key_limit
from django_ratequeue.engine.fairness.shares import weighted_rounds
from django_ratequeue.models import Attempt, Job
from tests.queue.test_key_limits import starts, waiting

WEIGHTS = st.lists(st.integers(1, 6), min_size=1, max_size=8)


def reference(weights: dict[str, int], length: int) -> list[str]:
    """Deficit round robin over backlogged keys, in key order: each key w turns a round."""
    cycle = [key for key in sorted(weights) for _ in range(weights[key])]
    return list(itertools.islice(itertools.cycle(cycle), length))


def in_turn(keys: list[str], cursor: str | None) -> list[str]:
    """What keys.keys_in_turn reads: the keys after ``cursor``, then from the first on."""
    if cursor is None:
        return keys
    return [k for k in keys if k > cursor] + [k for k in keys if k <= cursor]


def check_shares(order: list[str], weights: dict[str, int]) -> None:
    """The shares are the weights' within one turn each; no key waits beyond a round."""
    total, weight_sum = len(order), sum(weights.values())
    counts = Counter(order)
    for key, weight in weights.items():
        assert abs(counts[key] - total * weight / weight_sum) <= 2 * weight, (key, counts)
        places = [-1, *(n for n, started in enumerate(order) if started == key), total]
        assert max(b - a for a, b in itertools.pairwise(places)) <= weight_sum + 1, key


@given(weights=WEIGHTS, rooms=st.lists(st.integers(1, 7), min_size=1, max_size=60))
def test_steps_of_any_size_follow_one_deficit_round_robin(weights, rooms) -> None:
    """Whatever each step can start, the starts join up into the reference sequence."""
    by_key = {f"k{n}": weight for n, weight in enumerate(weights)}
    keys = sorted(by_key)
    cursor: str | None = None
    credit = 0
    order: list[str] = []
    for room in rooms:
        turn = in_turn(keys, cursor)
        if cursor is not None and credit > 0:
            turn = [cursor, *(key for key in turn if key != cursor)]
        else:
            credit = 0
        jobs = {key: [Job(concurrency_key=key, priority=0) for _ in range(room)] for key in turn}
        chosen = weighted_rounds(turn, jobs, by_key, credit)[:room]
        order += [job.concurrency_key for job, _round, _left in chosen]
        cursor, credit = chosen[-1][0].concurrency_key, chosen[-1][2]
    assert order == reference(by_key, len(order))
    check_shares(order, by_key)


QUEUE_NAMES = (f"shares-{n}" for n in itertools.count())


@pytest.mark.django_db
@override_settings(RATEQUEUE={"MAX_CONCURRENCY": 50, "QUEUES": {}})
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a shrink would take minutes
)
@given(
    weights=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    total=st.integers(1, 3),
)
def test_the_loop_shares_starts_by_weight_and_starves_no_key(weights, total) -> None:
    """Real steps, each a new leader (its turns from LoopState), total_concurrency caps."""
    queue = next(QUEUE_NAMES)
    Attempt.objects.all().delete()  # the last example's jobs: all started and ended
    Job.objects.all().delete()
    by_key = {f"k{n}": weight for n, weight in enumerate(weights)}
    queues = {queue: {"max_concurrency": 50, "total_concurrency": total}}
    with override_settings(RATEQUEUE={"MAX_CONCURRENCY": 50, "QUEUES": queues}):
        rounds = 3 * sum(weights)
        waiting(queue, [f"{queue}/{key}" for key in by_key], per_key=rounds)
        for key, weight in by_key.items():
            set_key_limit(queue, f"{queue}/{key}", weight=weight)
        order = starts(-(-rounds // total))
    keyed = [key.removeprefix(f"{queue}/") for key in order]
    assert len(keyed) >= rounds
    assert keyed[:rounds] == reference(by_key, rounds)
    check_shares(keyed[:rounds], by_key)
    assert not Attempt.objects.filter(active=True, queue=queue, ended_at=None).exists()

"""The promise held to the dispatch: for random queues, keys, limits, weights, priorities
and a rate-gated queue (one limit, or each key's plan), before each step of the real
loop, the jobs ``job_etas`` says start now are the jobs the step starts, and each copy of
a queue without a rate limit starts its jobs in the order of their positions.

(In a rate-gated queue, a job whose tokens are reserved for later keeps its place but
lets a job of cost 0 behind it start first: there the position is not the order.)"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from django_ratequeue import Status, enqueue, set_key_limit
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.models import Attempt, Job
from django_ratequeue.plugins.eta.estimates import Eta, job_etas
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop
from tests.ratelimit import plans

KEYS = ["", "a", "b", "c"]
# Two tokens at once, then one every 20 s: the loop's steps (20 s apart) outrun it.
TOKENS = {"kind": "token bucket", "rate": 3, "period": 60, "capacity": 2}
# The same, refusing to reserve more than 2 tokens ahead.
FEW_AHEAD = {**TOKENS, "max_reserved": 2}
NAMES = (f"held{n}" for n in itertools.count())
# A key's own limits: the key, its max_concurrency (0: none start) and weight (None: the
# queue's).
KEY_LIMIT = (st.sampled_from(KEYS), st.none() | st.integers(0, 3), st.none() | st.integers(1, 3))
# Each key's plan: free, pro, metered or reserving (at most 1 token ahead).
PLAN_LIMIT = "tests.ratelimit.plans.plan_limit"


@st.composite
def examples(draw: Any) -> dict[str, Any]:
    """Queues with limits (one maybe rate-gated), keys' own limits and weights, and jobs."""
    queues = [f"q{n}" for n in range(draw(st.integers(1, 3)))]
    limits = {
        queue: {
            "max_concurrency": draw(st.integers(1, 3)),
            "total_concurrency": draw(st.none() | st.integers(1, 4)),
            "key_weight": draw(st.integers(1, 2)),
        }
        for queue in queues
    }
    gate = draw(st.sampled_from(["", "tokens", "few_ahead", "plans"]))
    if gate:
        limits["q0"]["rate_limit"] = gate
    tiers = {key: draw(st.sampled_from(["free", "pro", "metered", "reserving"])) for key in KEYS}
    key_limits = draw(st.lists(st.tuples(st.sampled_from(queues), *KEY_LIMIT), max_size=4))
    work = draw(
        st.lists(
            st.tuples(
                st.sampled_from(queues),
                st.sampled_from(KEYS),
                st.integers(-1, 1),
                st.integers(0, 2),  # the cost, drawn from q0's rate limit if it has one
            ),
            min_size=1,
            max_size=14,
        )
    )
    environment = draw(st.integers(1, 6))
    return {
        "queues": limits,
        "keys": key_limits,
        "jobs": work,
        "environment": environment,
        "tiers": tiers,
    }


def configure(example: dict[str, Any], name: str) -> dict[str, Any]:
    """Return the example's RATEQUEUE, its queues and rate limit named after ``name``."""
    queues = {}
    for queue, config in example["queues"].items():
        config = dict(config)
        if "rate_limit" in config:
            config["rate_limit"] = f"{name}-{config['rate_limit']}"
        queues[f"{name}-{queue}"] = config
    limits = {
        f"{name}-tokens": TOKENS,
        f"{name}-few_ahead": FEW_AHEAD,
        f"{name}-plans": {"per_key": PLAN_LIMIT},
    }
    return {"MAX_CONCURRENCY": example["environment"], "QUEUES": queues, "RATE_LIMITS": limits}


def starting_now(clock: Clock) -> tuple[set[str], dict[str, Eta]]:
    """Return the WAITING jobs whose estimate starts them now, and every estimate (this
    process's agent beats: a live worker serves every queue)."""
    beat(force=True)
    waiting = list(Job.objects.filter(status=Status.WAITING))
    etas = job_etas(waiting, clock.now())
    return {pk for pk, eta in etas.items() if eta.estimated_start == clock.now()}, etas


def run_step(clock: Clock) -> list[str]:
    """Run one step of a new leader; return the jobs it started, and end their runs."""
    leading_loop().step()
    started = list(Attempt.objects.filter(active=True).values_list("job_id", flat=True))
    Attempt.objects.filter(active=True).update(
        active=False, started_at=clock.now(), ended_at=clock.now()
    )
    Job.objects.filter(status=Status.RUNNING).update(status=Status.COMPLETE)
    return started


def check_copy_order(first: dict[str, Eta], step_of: dict[str, int], gated: str) -> None:
    """Each copy of a queue but ``gated`` starts its jobs in the order of their first
    positions."""
    copies: dict[tuple[str, str], list[str]] = defaultdict(list)
    for job in Job.objects.filter(pk__in=list(first)).exclude(queue=gated):
        copies[(job.queue, job.concurrency_key)].append(job.pk)
    for ids in copies.values():
        ids.sort(key=lambda pk: first[pk].position or 0)
        assert [first[pk].position for pk in ids] == list(range(len(ids)))
        steps = [step_of[pk] for pk in ids if pk in step_of]
        assert steps == sorted(steps), [(first[pk], step_of.get(pk)) for pk in ids]
        assert [pk for pk in ids if pk in step_of] == ids[: len(steps)]


@pytest.mark.django_db
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a shrink would take minutes
)
@given(example=examples())
def test_eta_tells_the_order_the_loop_starts_jobs(
    example: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step after step, 20 s apart: each step starts exactly the jobs estimated to start
    now; a job estimated "paused" never starts, every other one does."""
    clock = freeze(monkeypatch)
    monkeypatch.setattr(
        plans, "PLANS", {key or None: tier for key, tier in example["tiers"].items()}
    )
    Attempt.objects.all().delete()  # the last example's jobs
    Job.objects.all().delete()
    name = next(NAMES)
    with override_settings(RATEQUEUE=configure(example, name)):
        for queue, key, limit, weight in example["keys"]:
            set_key_limit(f"{name}-{queue}", key, max_concurrency=limit, weight=weight)
        for queue, key, priority, cost in example["jobs"]:
            clock.advance(0.001)
            enqueue(
                jobs.add,
                args=[1, 1],
                queue=f"{name}-{queue}",
                concurrency_key=key,
                priority=priority,
                cost=cost,
            )
        first: dict[str, Eta] = {}
        step_of: dict[str, int] = {}
        for number in range(3 * len(example["jobs"]) + 3):
            promised, etas = starting_now(clock)
            first = first or etas
            started = run_step(clock)
            assert set(started) == promised, (promised, started, etas)
            step_of.update((pk, number) for pk in started)
            clock.advance(20)
        gated = f"{name}-q0" if example["queues"]["q0"].get("rate_limit") else ""
        check_copy_order(first, step_of, gated)
        never = {pk for pk, eta in first.items() if eta.basis == "paused"}
        assert not never & set(step_of)
        if not example["queues"]["q0"].get("rate_limit"):  # a plan may hold some for hours
            assert set(step_of) == set(first) - never

"""A queue gated by a keyed rate limit (plan tiers): each concurrency key draws its cost
from its own limit, under its own plan, and one key's refusal or broken plan holds back
only that key. Run with the loop in this process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_ratequeue import RateLimited, Status, enqueue, get_rate_limit_value
from django_ratequeue.models import Job, RateLimitState
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass
from tests.ratelimit import plans

pytestmark = pytest.mark.django_db

TENANT_LIMITS = {
    "RATE_LIMITS": {"tenant_tokens": {"per_key": "tests.ratelimit.plans.plan_limit"}},
    "QUEUES": {"llm": {"max_concurrency": 10, "rate_limit": "tenant_tokens"}},
}


@pytest.fixture(autouse=True)
def tenant_plans() -> Iterator[None]:
    plans.PLANS.clear()
    plans.PLANS.update({"small": "reserving", "big": "pro"})
    with override_settings(RATEQUEUE=TENANT_LIMITS):
        yield
    plans.PLANS.clear()


def statuses(key: str) -> list[str]:
    jobs_of_key = Job.objects.filter(concurrency_key=key).order_by("created_at")
    return [job.status for job in jobs_of_key]


def test_each_key_draws_from_its_own_plans_limit() -> None:
    for _ in range(4):
        enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="small")
        enqueue(jobs.add, args=[2, 2], queue="llm", concurrency_key="big")
    leading_loop().step()
    # small: 1 a minute, 1 reserved ahead at most: one starts, one waits for its
    # reservation, two wait; its refusal holds back small only, not the queue.
    big = Job.objects.filter(concurrency_key="big")
    assert big.filter(status=Status.WAITING).count() == 0
    small = Job.objects.filter(concurrency_key="small")
    assert small.exclude(status=Status.WAITING).count() == 1
    assert small.filter(tokens_reserved=True, status=Status.WAITING).count() == 1
    assert small.filter(tokens_reserved=False, status=Status.WAITING).count() == 2
    keys = set(RateLimitState.objects.values_list("key", flat=True))
    assert keys == {"small", "big"}  # no row without a key: the queue's keys are the keys
    # small: its token spent and one reserved (refilling 1 a minute since); big: 4 of 20.
    assert -1 <= get_rate_limit_value("tenant_tokens", key="small") < -0.5
    assert 16 <= get_rate_limit_value("tenant_tokens", key="big") < 16.5


def test_enqueue_checks_the_reservation_room_of_the_jobs_key() -> None:
    for _ in range(2):
        enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="small")
    leading_loop().step()  # small's token is spent and one more reserved: no room left
    with pytest.raises(RateLimited, match="'tenant_tokens' for key 'small' exceeded"):
        enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="small")
    enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="big")


def test_an_upgrade_applies_at_the_next_step() -> None:
    for _ in range(3):
        enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="small")
    leading_loop().step()
    assert Job.objects.filter(status=Status.WAITING, tokens_reserved=False).count() == 1
    plans.PLANS["small"] = "metered"  # 100 a minute, 1000 reserved ahead at most
    leading_loop().step()
    assert Job.objects.filter(status=Status.WAITING, tokens_reserved=False).count() == 0


def test_a_key_whose_plan_breaks_fails_its_job_and_no_other() -> None:
    broken = enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="churned")
    fine = enqueue(jobs.add, args=[2, 2], queue="llm", concurrency_key="big")
    plans.PLANS["churned"] = "no such tier"  # the plan function raises a KeyError now

    def finished() -> bool:
        run_pass()
        return Job.objects.filter(pk=fine.id, status=Status.COMPLETE).exists()

    wait_for(finished, timeout=30, message="the other key's job to complete")
    failed = Job.objects.get(pk=broken.id)
    assert failed.status == Status.FAILED
    assert "cannot be reserved from 'tenant_tokens'" in failed.error
    assert "raised for key 'churned': KeyError" in failed.error
    assert fine.result() == 4


def test_enqueue_for_a_key_whose_plan_breaks_is_a_clear_error() -> None:
    plans.PLANS["churned"] = "no such tier"
    with pytest.raises(ValueError, match=r"'tenant_tokens'.*raised for key 'churned'"):
        enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="churned")
    assert not Job.objects.exists()

"""A real cluster runs a queue gated by a keyed rate limit: each concurrency key's jobs
draw from the limit of its own plan, and stay within it over any interval."""

from __future__ import annotations

from typing import Any

from django_ratequeue import enqueue
from django_ratequeue.models import Attempt, Job, RateLimitState
from tests.queue import jobs


def reserved_times(handles: list[Any]) -> list[tuple[float, int]]:
    """Return when each job's tokens were due (seconds from the first) and its cost.

    A job whose tokens were there at once keeps its enqueue time as start_at and took them
    when it was dispatched; a reserved one was due at its start_at."""
    rows = Job.objects.filter(pk__in=[h.id for h in handles])
    due = []
    for job in rows:
        attempt = Attempt.objects.get(job_id=job.pk)
        due.append(job.start_at if job.start_at > job.created_at else attempt.dispatched_at)
    first = min(due)
    return sorted(((moment - first).total_seconds(), 1) for moment in due)


def test_a_real_cluster_draws_each_keys_jobs_from_its_own_plan(cluster: Any) -> None:
    """Two tenants, one queue: "pro:a" at 20 a second (5 at once), "free:b" at 5 (2 at
    once). Each key's reservations stay within its own plan over any interval."""
    cluster(
        workers=2,
        RATE_LIMITS={"tenant": {"per_key": "tests.ratelimit.plans.tier_by_prefix"}},
        QUEUES={"gated": {"max_concurrency": 10, "rate_limit": "tenant"}},
    )
    plans_of = {"pro:a": (20.0, 5, 15), "free:b": (5.0, 2, 8)}  # rate, capacity, jobs
    handles = {
        key: [
            enqueue(jobs.add, args=[i, 0], queue="gated", concurrency_key=key)
            for i in range(count)
        ]
        for key, (_rate, _capacity, count) in plans_of.items()
    }
    for handle in [h for of_key in handles.values() for h in of_key]:
        handle.result(timeout=60)
    slack = 0.5  # a step's clock against the limit's, and the claims after it
    spans = {}
    for key, (rate, capacity, count) in plans_of.items():
        times = reserved_times(handles[key])
        spans[key] = times[-1][0]
        for i, (first, _) in enumerate(times):
            spent = 0
            for moment, cost in times[i:]:
                spent += cost
                assert spent <= capacity + rate * (moment - first + slack) + 1e-9, key
        # The plan really held its key back: its last tokens came late (the first job's
        # time is its dispatch, a little after its tokens were taken on a busy machine).
        assert times[-1][0] >= (count - capacity) / rate * 0.75, key
    # (No row without a key was drawn on; the keys' rows may be pruned once full again.)
    assert not RateLimitState.objects.filter(name="tenant", key="").exists()
    assert spans["pro:a"] < spans["free:b"]  # more jobs, yet done sooner: its own plan

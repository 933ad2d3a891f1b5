"""Flow control: runtime queue control, fairness across concurrency keys, rate-gated
queues with reservations (the cluster tests run a real qcluster)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Max
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_ratequeue import (
    RateLimited,
    Status,
    enqueue,
    enqueue_many,
    pause_queue,
    resume_queue,
    set_queue_concurrency,
)
from django_ratequeue.engine.limits import QueueLimits
from django_ratequeue.models import Attempt, Job, QueueSetting
from django_ratequeue.monitor.overview import queue_overview
from django_ratequeue.ratelimit.decisions import rate_limit
from tests.queue import jobs
from tests.queue.steps import run_pass


def limit_label(name: str) -> str:
    return next(q.limit_label for q in queue_overview().queues if q.name == name)


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"emails": {"max_concurrency": 2}}})
def test_runtime_control_overrides_settings_and_is_validated() -> None:
    assert QueueLimits.of("emails").max_concurrency == 2
    set_queue_concurrency("emails", 5)
    assert (QueueLimits.of("emails").max_concurrency, QueueLimits.of("emails").source) == (
        5,
        "runtime",
    )
    assert limit_label("emails") == "5 (set at runtime)"
    pause_queue("emails")
    assert QueueLimits.of("emails").max_concurrency == 0
    assert limit_label("emails") == "paused at runtime"
    resume_queue("emails")
    assert QueueLimits.of("emails").max_concurrency == 5
    set_queue_concurrency("emails", None)
    assert QueueLimits.of("emails") == QueueLimits(max_concurrency=2, source="settings")
    # An unconfigured queue can be given a limit too.
    set_queue_concurrency("reports", 3)
    assert limit_label("reports") == "3 (set at runtime)"

    for bad in (-1, 101, True, "2"):
        with pytest.raises(
            ValueError, match=r"from 0 \(paused\) to MAX_QUEUE_CONCURRENCY \(100\)"
        ):
            set_queue_concurrency("emails", bad)
    with pytest.raises(ValueError, match="non-empty string"):
        pause_queue("")
    assert list(QueueSetting.objects.values_list("name", "paused", "max_concurrency")) == [
        ("emails", False, None),
        ("reports", None, 3),
    ]


@pytest.mark.django_db
def test_the_limit_set_at_enqueue_is_the_next_jobs_in_one_statement() -> None:
    """An unconfigured queue's jobs carry the limit they were enqueued with (the loop
    applies each job's own); the overview shows the one of the job the loop dispatches
    next (the waiting ones first), reading one row per queue in one statement."""
    for queue, priority, limit in [("a", 0, 3), ("a", 5, 4), ("b", 0, 2), ("c", 0, None)]:
        handle = enqueue(jobs.add, args=[1, 2], queue=queue, priority=priority)
        Job.objects.filter(pk=handle.id).update(max_concurrency=limit)
    scheduled = enqueue(jobs.add, args=[1, 2], queue="d", run_after=timedelta(hours=1))
    Job.objects.filter(pk=scheduled.id).update(max_concurrency=7)
    with CaptureQueriesContext(connection) as captured:
        labels = {q.name: q.limit_label for q in queue_overview().queues}
    assert labels["a"] == "4 (set at enqueue)"  # the higher priority is dispatched first
    assert labels["b"] == "2 (set at enqueue)"
    assert labels["c"] == "1 (not configured)"
    assert labels["d"] == "7 (set at enqueue)"
    of_jobs = [q["sql"] for q in captured.captured_queries if Job._meta.db_table in q["sql"]]
    assert len([sql for sql in of_jobs if "max_concurrency" in sql]) == 1


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"emails": {"max_concurrency": 2, "paused": True}}})
def test_management_command_changes_a_queue() -> None:
    out = StringIO()
    call_command("ratequeue_queue", "resume", "emails", stdout=out)
    call_command("ratequeue_queue", "set", "emails", "7", stdout=out)
    assert QueueLimits.of("emails").max_concurrency == 7
    assert "max_concurrency 7 (runtime)" in out.getvalue()
    with pytest.raises(CommandError, match="MAX_QUEUE_CONCURRENCY"):
        call_command("ratequeue_queue", "set", "emails", "-3")
    with pytest.raises(CommandError, match="only with them"):
        call_command("ratequeue_queue", "pause", "emails", "3")
    call_command("ratequeue_queue", "reset", "emails", stdout=out)
    assert QueueLimits.of("emails").max_concurrency == 0  # paused again, as in settings
    assert not QueueSetting.objects.exists()


@pytest.mark.django_db
def test_admin_edits_queue_settings(admin_client) -> None:
    url = "/admin/django_ratequeue/queuesetting/add/"
    response = admin_client.post(url, {"name": "emails", "max_concurrency": "500"})
    assert response.status_code == 200 and b"MAX_QUEUE_CONCURRENCY" in response.content
    assert not QueueSetting.objects.exists()
    admin_client.post(url, {"name": "emails", "paused": "true", "max_concurrency": "3"})
    assert QueueLimits.of("emails").max_concurrency == 0
    admin_client.post(
        "/admin/django_ratequeue/queuesetting/",
        {"action": "resume", "_selected_action": ["emails"]},
    )
    assert QueueLimits.of("emails").max_concurrency == 3
    response = admin_client.post(url, {"name": "llm", "total_concurrency": "0"})
    assert response.status_code == 200 and b"total_concurrency" in response.content
    admin_client.post(url, {"name": "llm", "total_concurrency": "4"})
    assert QueueLimits.of("llm").total_concurrency == 4


@pytest.mark.django_db
def test_reservation_cap_refuses_at_enqueue_and_writes_nothing() -> None:
    limits = {"tight": {"kind": "token bucket", "rate": 1, "period": 60, "max_reserved": 2}}
    with override_settings(
        RATEQUEUE={"RATE_LIMITS": limits, "QUEUES": {"gated": {"rate_limit": "tight"}}}
    ):
        rate_limit("tight", count=3, reserve=True)  # the bucket's token and 2 reserved
        with pytest.raises(RateLimited) as refused:
            enqueue(jobs.add, args=[1, 2], queue="gated")
        assert refused.value.retry_at is not None
        with pytest.raises(RateLimited):
            enqueue_many(jobs.add, [[1, 2]], queue="gated")
        assert not Job.objects.exists()
        enqueue(jobs.add, args=[1, 2], queue="gated", cost=0)  # free work is never refused


@pytest.mark.django_db
def test_a_batch_is_checked_like_single_enqueues() -> None:
    """Twenty cost-1 jobs fit one by one, so they fit as one batch too (the loop reserves
    each job's cost when it could start, not the batch's total at enqueue)."""
    limits = {"small": {"kind": "token bucket", "rate": 5, "period": 60, "max_reserved": 10}}
    with override_settings(
        RATEQUEUE={"RATE_LIMITS": limits, "QUEUES": {"gated": {"rate_limit": "small"}}}
    ):
        handles = enqueue_many(jobs.add, [[i, i] for i in range(20)], queue="gated")
    assert len(handles) == Job.objects.filter(queue="gated").count() == 20


@pytest.mark.django_db
def test_a_cost_the_limit_can_never_grant_fails_the_job() -> None:
    handle = enqueue(jobs.add, args=[1, 2], queue="gated", cost=5)  # not rate-gated yet
    small = {"kind": "token bucket", "rate": 1, "period": 60, "capacity": 2, "max_reserved": 1}
    limits = {"small": small}
    gated = {"RATE_LIMITS": limits, "QUEUES": {"gated": {"rate_limit": "small"}}}
    with override_settings(RATEQUEUE=gated):
        with pytest.raises(ValueError, match="can never fit"):
            enqueue(jobs.add, args=[1, 2], queue="gated", cost=5)  # refused at enqueue
        run_pass()  # the loop fails the one enqueued before
    job = Job.objects.get(pk=handle.id)
    assert job.status == Status.FAILED
    assert "cannot be reserved from 'small'" in job.error and "can never fit" in job.error


def test_paused_queue_starts_nothing_until_resumed(cluster) -> None:
    cluster(QUEUES={"emails": {"max_concurrency": 2}})
    pause_queue("emails")
    held = enqueue(jobs.add, args=[1, 2], queue="emails")
    enqueue(jobs.add, args=[3, 4]).result(timeout=30)  # the loop ran a pass after the enqueue
    assert Job.objects.get(pk=held.id).status == Status.WAITING
    resume_queue("emails")
    assert held.result(timeout=30) == 3


def test_small_key_is_not_delayed_by_a_big_backlog(cluster) -> None:
    cluster(QUEUES={"tenants": {"max_concurrency": 2, "total_concurrency": 2}})
    big = enqueue_many(jobs.sleep, [[0.01]] * 300, queue="tenants", concurrency_key="big")
    mark = Attempt.objects.aggregate(last=Max("pk"))["last"] or 0
    small = enqueue_many(jobs.sleep, [[0.01]] * 5, queue="tenants", concurrency_key="small")
    for handle in small:
        handle.result(timeout=60)
    # The starts after the small key's enqueue, in the order the loop made them.
    order = list(
        Attempt.objects.filter(pk__gt=mark).order_by("pk").values_list("job_id", flat=True)
    )
    positions = [order.index(handle.id) for handle in small]
    # Keys take turns: the small key's n-th job starts within about 2n starts.
    assert all(position <= 2 * (n + 1) + 2 for n, position in enumerate(positions)), positions
    assert Job.objects.filter(pk__in=[h.id for h in big], status=Status.WAITING).exists()


def test_rate_gated_queue_never_overspends(cluster) -> None:
    rate, capacity = 40.0, 10
    cluster(
        workers=2,
        RATE_LIMITS={"llm": {"kind": "token bucket", "rate": rate, "period": 1, "capacity": 10}},
        QUEUES={"gated": {"max_concurrency": 10, "rate_limit": "llm"}},
    )
    costs = [1, 4, 2, 1, 3] * 8 + [capacity]  # mixed, and one job as big as the bucket
    handles = [
        enqueue(jobs.add, args=[i, 0], queue="gated", cost=cost) for i, cost in enumerate(costs)
    ]
    for handle in handles:
        handle.result(timeout=60)
    rows = Job.objects.filter(pk__in=[h.id for h in handles]).values_list(
        "pk", "created_at", "start_at", "cost"
    )
    jobs_by_id = {pk: (created_at, start_at, cost) for pk, created_at, start_at, cost in rows}
    starts = []  # (dispatched, when its tokens were due, cost)
    attempts = list(Attempt.objects.filter(job_id__in=jobs_by_id))
    steps = sorted({attempt.dispatched_at for attempt in attempts})
    # How long a step that took tokens at once may have run past its start (dispatched_at):
    # it drew them, one job after the other, before it committed, which is before the next
    # step's start. Both on the leader's clock: a runner's claim is on its own, whose
    # offset from the leader's may be off by tens of milliseconds on a loaded machine.
    step_spread = 0.05
    for attempt in attempts:
        created_at, start_at, cost = jobs_by_id[attempt.job_id]
        # A job whose tokens were there at once keeps its enqueue time as start_at and took
        # them in the step that started it; a reserved one starts at its reserved time.
        reserved = start_at if start_at > created_at else attempt.dispatched_at
        if reserved == attempt.dispatched_at:
            following = [step for step in steps if step > attempt.dispatched_at]
            ran = (following[0] - attempt.dispatched_at).total_seconds() if following else 0.5
            # At most 0.5 s: a dispatch without its reservation would overspend by whole
            # buckets at once, far beyond what that slack allows.
            step_spread = min(max(step_spread, ran), 0.5)
        starts.append((attempt.dispatched_at, reserved, cost))
    starts.sort()
    assert len(starts) == len(costs)
    # No job started before the time its reservation gave.
    assert all(dispatched >= reserved for dispatched, reserved, _ in starts)

    def spent_within(times: list[tuple[float, int]], slack: float) -> None:
        times = sorted(times)
        for i, (first, _) in enumerate(times):
            spent = 0
            for moment, cost in times[i:]:
                spent += cost
                allowed = capacity + rate * (moment - first + slack)
                # (A spend exactly at the allowance computes a hair under it in floats.)
                assert spent <= allowed + 1e-9, (first, moment, spent, allowed)

    epoch = starts[0][0]
    # The reservations never exceed the bucket over any interval (the slack covers the
    # time between a step's start and its draws, a few milliseconds on a quiet machine,
    # bounded by the step that followed)...
    spent_within([((r - epoch).total_seconds(), c) for _, r, c in starts], step_spread)
    # ...and the starts follow them, late by at most the loop's latency.
    lateness = max((d - r).total_seconds() for d, r, _ in starts)
    spent_within([((d - epoch).total_seconds(), c) for d, _, c in starts], lateness + 0.05)
    assert sum(costs) > capacity + rate  # the test really spanned more than the bucket
    assert Counter(costs)[capacity] == 1
    assert timedelta(seconds=(sum(costs) - capacity) / rate * 0.9) < starts[-1][0] - epoch

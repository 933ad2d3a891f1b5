"""monitor/snapshot.snapshot(): the state it gives each queue, its depth series rebuilt from
the rollups, and its windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from django_ratequeue import clock, enqueue, rate_limit, set_queue_concurrency
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import QueueMinute
from django_ratequeue.monitor.figures import Figures
from django_ratequeue.monitor.series import depth_series, window_bounds
from django_ratequeue.monitor.snapshot import snapshot
from django_ratequeue.plugins.rollups.counting import ARRIVALS_SETTLE
from django_ratequeue.ratelimit.status import KeysNow
from django_ratequeue.templatetags.ratequeue_admin import badges, capped_count
from example_project.demo.accounts import create_demo_accounts
from tests.dashboard.test_views import claim_remote, running
from tests.queue import jobs
from tests.queue.steps import freeze, leading_loop

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def figures(minute: int, **counts: int) -> Figures:
    fields = dict.fromkeys(
        ["enqueued", "started", "completed", "failed", "retried", "canceled"], 0
    )
    return Figures(
        T0 + timedelta(minutes=minute),
        **{**fields, **counts},
        wait_p50=None,
        wait_p95=None,
        wait_p99=None,
        run_p50=None,
        run_p95=None,
        run_p99=None,
        tokens_reserved=0,
        tokens_spent=0,
    )


def test_depth_is_rebuilt_backwards_from_the_counts_now() -> None:
    flows = [
        figures(0, enqueued=4),
        figures(1, started=3),
        figures(2, completed=2, retried=1),
        figures(3, enqueued=1, started=2, failed=1),
    ]
    depth = depth_series(flows, unfinished_now=2, running_now=1)
    assert [(d.unfinished, d.running) for d in depth] == [(4, 0), (4, 3), (2, 0), (2, 1)]
    assert [d.start for d in depth] == [f.start for f in flows]


def test_depth_never_goes_below_zero_nor_running_above_unfinished() -> None:
    depth = depth_series([figures(0, enqueued=50, started=40), figures(1)], 3, 9)
    assert all(0 <= d.running <= d.unfinished for d in depth)


@pytest.mark.django_db
def test_the_depth_holds_the_arrivals_the_loop_has_not_counted_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst: the loop counts its arrivals ARRIVALS_SETTLE after their enqueue; until
    then the depth must not draw today's backlog across the whole window."""
    frozen = freeze(monkeypatch)
    frozen.moment = frozen.moment.replace(second=1, microsecond=0) + timedelta(minutes=1)
    # at a minute's start, so that the settling below stays inside one minute
    loop = leading_loop()
    loop.step()  # counting arrivals starts
    for n in range(5):
        enqueue(jobs.add, args=[n, n], queue="emails")
    loop.run(30)  # starts two (emails runs two at a time); counts no arrival yet

    def depths() -> list[list[tuple[int, int]]]:
        data = snapshot()
        emails = {q.name: q for q in data.queues}["emails"]
        return [[(d.unfinished, d.running) for d in q.depth] for q in (emails, data.total)]

    flat_before = [[(0, 0)] * 59 + [(5, 2)]] * 2
    assert depths() == flat_before
    frozen.advance(ARRIVALS_SETTLE.total_seconds() + 1)
    loop.run(30)  # counts them now: the same depth, none counted twice
    assert sum(QueueMinute.objects.values_list("enqueued", flat=True)) == 5
    assert depths() == flat_before


@pytest.mark.parametrize(
    ("window", "points", "step"),
    [("hour", 60, timedelta(minutes=1)), ("day", 96, timedelta(minutes=15))],
)
def test_a_window_ends_with_the_step_filling_now(
    window: str, points: int, step: timedelta
) -> None:
    now = T0 + timedelta(minutes=37, seconds=12)
    since, got = window_bounds(window, now)  # type: ignore[arg-type]
    assert got == step
    assert since + step * points > now >= since + step * (points - 1)


def test_an_unknown_window_is_refused() -> None:
    with pytest.raises(ValueError, match="Unknown window 'week'"):
        snapshot("week")  # type: ignore[arg-type]


@pytest.mark.django_db
def test_a_rate_gated_queue_without_tokens_is_rate_bound() -> None:
    enqueue(jobs.add, args=[1, 1], queue="llm", cost=10)
    llm = {q.name: q for q in snapshot().queues}["llm"]
    assert not llm.rate_bound  # the bucket is full
    rate_limit("llm_tokens", count=200)
    rate_limit("llm_tokens", count=1000, reserve=True)  # 50 s of refill reserved ahead
    data = snapshot()
    llm = {q.name: q for q in data.queues}["llm"]
    assert llm.rate_bound and ("rate-bound", "rate-bound") in badges(llm)
    use = {u.name: u for u in data.rate_limits}["llm_tokens"]
    assert use.capacity == 200 and use.value < -900 and use.used == 1
    assert use.reserved > 900
    assert use.queues == ("llm",)


@pytest.mark.django_db
def test_a_limit_used_per_key_shows_its_keys_out_of_tokens(
    client: Client, admin_client: Client
) -> None:
    """failed_logins is drawn per username and address (contrib/logins.py): its value
    without a key, always full, says nothing; a locked-out user does."""
    create_demo_accounts()
    for _ in range(11):  # the demo's login allows 10 failures an hour
        client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    client.post("/accounts/login/", {"username": "bob", "password": "wrong"})
    uses = {u.name: u for u in snapshot().rate_limits}
    logins = uses["failed_logins"]
    assert not logins.without_key  # nothing draws on it without a key
    assert (logins.keys, capped_count(logins.keys.keys, logins.keys.capped)) == (
        KeysNow(2, 1, capped=False),
        "2",
    )
    llm = uses["llm_tokens"]  # the llm queue draws on it, without a key
    assert llm.without_key and llm.keys == KeysNow(0, 0, capped=False)
    page = admin_client.get("/admin/django_ratequeue/job/dashboard/").content.decode()
    row = page[page.index('<th scope="row">failed_logins</th>') :].split("</tr>")[0]
    assert "not drawn on without a key" in row and "1 out of tokens" in row


@pytest.mark.django_db
def test_total_concurrency_saturates_a_queue_over_its_keys() -> None:
    # llm: 1 per key, 4 in all.
    for key in ["a", "b", "c"]:
        running(enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key=key).id)
    # Every key running is at its limit of 1.
    assert {q.name: q for q in snapshot().queues}["llm"].saturated
    set_queue_concurrency("llm", 2)
    llm = {q.name: q for q in snapshot().queues}["llm"]
    assert not llm.saturated  # each key runs 1 of 2, 3 of 4 in all
    running(enqueue(jobs.add, args=[1, 1], queue="llm", concurrency_key="d").id)
    llm = {q.name: q for q in snapshot().queues}["llm"]
    assert llm.saturated and llm.in_use == 4


@pytest.mark.django_db
def test_remote_workers_are_listed_by_key_with_what_they_run() -> None:
    gpu, _key = create_key("gpu box", ["remote"])
    create_key("spare box", ["remote"])
    claim_remote(gpu, "w1", count=2)
    gpu_box, spare_box = snapshot().remote_workers
    assert (gpu_box.key, gpu_box.prefix, gpu_box.queues) == ("gpu box", gpu.prefix, ["remote"])
    assert (gpu_box.running, gpu_box.instances) == (2, {"w1": 2})
    assert (spare_box.key, spare_box.running) == ("spare box", 0)


@pytest.mark.django_db
def test_the_environment_is_saturated_at_max_concurrency(settings: object) -> None:
    for n in range(8):  # MAX_CONCURRENCY is 8 in the example project
        running(enqueue(jobs.add, args=[n, 1], queue=f"q{n}").id, worker=f"w{n}")
    data = snapshot()
    assert data.in_use == 8 and data.environment_saturated
    assert clock.now() >= data.taken_at

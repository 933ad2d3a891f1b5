"""A job's promised start over HTTP: in its detail (``eta``), and as ``eta`` events of its
stream, sent when the estimate moved materially and at most once a second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from django_ratequeue.api import sse
from django_ratequeue.api.watch import ETA_EVERY, Look, Subscription, Watcher
from django_ratequeue.engine.handles import Handle
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Job
from django_ratequeue.plugins.eta.estimates import Eta, moved_materially
from tests.api.conftest import API, enqueue
from tests.api.test_events import events, read

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
ONE_SLOT = {"QUEUES": {"default": {"max_concurrency": 1, "public_position": True}}}
SHARED = {"QUEUES": {"default": {"max_concurrency": 1}}}


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@pytest.mark.django_db
@override_settings(RATEQUEUE=ONE_SLOT)
def test_the_detail_of_a_waiting_job_tells_its_place(api: APIClient) -> None:
    beat(force=True)  # a live worker, as its agent beats
    ids = [enqueue(api, "tests.api.jobs.greet", args=[name]).json()["id"] for name in "ABC"]
    eta = api.get(f"{API}jobs/{ids[2]}/").json()["eta"]
    assert eta["position"] == 2
    assert eta["position_capped"] is False
    assert eta["basis"] == "unknown"  # nothing ran in the queue yet: no run time to go by
    assert eta["estimated_start"] is None
    assert parse_datetime(eta["earliest_start"]) is not None
    first = api.get(f"{API}jobs/{ids[0]}/").json()["eta"]
    assert (first["position"], first["basis"]) == (0, "throughput")
    assert first["estimated_start"] == first["earliest_start"]


@pytest.mark.django_db
@override_settings(RATEQUEUE=SHARED)
def test_a_shared_queue_shows_an_owner_the_estimate_alone(
    api: APIClient, other: APIClient
) -> None:
    """Its position would count the other owners' jobs ahead (issue 31): it is null,
    unless the queue's ``public_position`` shows it (above)."""
    beat(force=True)  # a live worker, as its agent beats
    for name in "AB":
        enqueue(other, "tests.api.jobs.greet", args=[name])
    job_id = enqueue(api, "tests.api.jobs.greet", args=["C"]).json()["id"]
    eta = api.get(f"{API}jobs/{job_id}/").json()["eta"]
    assert (eta["position"], eta["position_capped"]) == (None, None)
    assert eta["basis"] == "unknown" and parse_datetime(eta["earliest_start"]) is not None
    owner = Job.objects.get(pk=job_id).owner
    assert Handle(job_id, owner=owner).eta().position == 2  # the project's code sees it


@pytest.mark.django_db
@override_settings(RATEQUEUE=SHARED)
def test_a_queue_keyed_per_owner_shows_the_position(api: APIClient, other: APIClient) -> None:
    """Each owner's jobs wait in a copy of the queue of their own (their concurrency key
    is their owner): the position counts only the owner's own jobs."""
    enqueue(other, "tests.api.jobs.greet_in_turn", args=["A"])
    ids = [enqueue(api, "tests.api.jobs.greet_in_turn", args=[n]).json()["id"] for n in "BC"]
    assert api.get(f"{API}jobs/{ids[1]}/").json()["eta"]["position"] == 1


@pytest.mark.django_db
def test_another_users_job_has_no_detail(api: APIClient, other: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["A"]).json()["id"]
    assert other.get(f"{API}jobs/{job_id}/").status_code == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("background_threads_stop")
def test_the_stream_of_a_waiting_job_sends_its_eta_once(
    api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing moves while the stream lasts (about 1.5 s, so read at least once more): one
    ``eta`` event, after its status."""
    monkeypatch.setattr(sse, "LIFETIME", 1.5)
    beat(force=True)  # a live worker, as its agent beats
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    seen = events(read(api, job_id))
    names = [name for name, _, _ in seen]
    assert names == ["status", "eta"]
    assert seen[1][2]["position"] is None  # the default queue is shared (above)
    assert seen[1][2]["basis"] == "throughput"


@pytest.mark.parametrize(
    ("after", "material"),
    [
        (Eta(3, NOW, at(60), "throughput"), False),
        (Eta(2, NOW, at(60), "throughput"), True),  # one fewer ahead
        (Eta(3, NOW, at(60), "paused"), True),
        (Eta(3, NOW, None, "unknown"), True),
        (Eta(3, NOW, at(65), "throughput"), False),  # 5 s of 60 s left: under 10%
        (Eta(3, NOW, at(67), "throughput"), True),
        (Eta(3, NOW, at(53), "throughput"), True),
    ],
)
def test_what_moves_materially(after: Eta, material: bool) -> None:
    before = Eta(3, NOW, at(60), "throughput")
    assert moved_materially(before, after, NOW) is material


def test_a_second_off_a_short_wait_is_no_news() -> None:
    before = Eta(0, NOW, at(3), "throughput")
    assert not moved_materially(before, Eta(0, NOW, at(3.9), "throughput"), NOW)
    assert moved_materially(before, Eta(0, NOW, at(4.5), "throughput"), NOW)
    assert moved_materially(None, before, NOW)


def test_a_start_due_now_stays_due_now_as_time_passes() -> None:
    due = Eta(0, NOW, NOW, "throughput")
    later = at(2)
    assert not moved_materially(due, Eta(0, later, later, "throughput"), later)


def look(eta: Eta | None) -> Look:
    return Look("waiting", 0, None, None, None, [], eta=eta)


def test_a_stream_is_handed_only_the_estimates_that_moved(local_clock: None) -> None:
    # Without the database: on the local clock, which the database's is not measured against.
    handed: list[Look | None] = []
    subscription = Subscription("job", 0, handed.append)
    first = Eta(4, NOW, at(3600), "throughput")
    subscription.hand(look(first))
    subscription.hand(look(Eta(4, NOW, at(3601), "throughput")))  # a second off an hour
    subscription.hand(look(Eta(3, NOW, at(3500), "throughput")))
    assert [h.eta if h else None for h in handed] == [first, Eta(3, NOW, at(3500), "throughput")]


@pytest.mark.django_db
def test_the_watcher_estimates_a_job_at_most_once_a_second(api: APIClient) -> None:
    job_id = enqueue(api, "tests.api.jobs.greet", args=["Ada"]).json()["id"]
    watcher = Watcher()
    handed: list[Any] = []
    subscription = Subscription(job_id, 0, handed.append)
    watcher.subscriptions[job_id] = [subscription]

    def estimated() -> bool:
        handed.clear()
        subscription.eta_shown = None  # every estimate would be news
        subscription.shown = None
        watcher.look_at([job_id])
        return handed[0].eta is not None

    assert estimated()
    assert not estimated()  # within the second
    watcher.estimated[job_id] -= ETA_EVERY  # as if a second went by
    assert estimated()

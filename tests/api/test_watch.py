"""The event streams' watcher (:mod:`django_ratequeue.api.watch`): one per process, it
reads the jobs that changed and hands each of their streams what it has not seen.

The streams here are plain subscriptions that keep what they are handed. The watcher
reads on its own connection: the tests commit what they set up (``transaction=True``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_ratequeue import enqueue
from django_ratequeue.api import watch
from django_ratequeue.api.watch import Look, Subscription, Watcher
from django_ratequeue.engine.models import Status
from django_ratequeue.engine.progress import UNSET, store
from django_ratequeue.models import Job, OutputChunk
from tests.cluster import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("background_threads_stop"),
]


class Stream:
    """What a stream was handed by the watcher, in order."""

    def __init__(self) -> None:
        self.looks: list[Look | None] = []
        self.lock = threading.Lock()

    def deliver(self, look: Look | None) -> None:
        with self.lock:
            self.looks.append(look)

    def texts(self) -> list[str]:
        with self.lock:
            return [text for look in self.looks if look for _, text in look.chunks]


@pytest.fixture
def watcher() -> Iterator[Watcher]:
    """A watcher of the test's own; its subscriptions end with the test."""
    own = Watcher()
    yield own
    for streams in list(own.subscriptions.values()):
        for subscription in list(streams):
            own.unsubscribe(subscription)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The jobs each read of the watcher asked for."""
    asked: list[set[str]] = []
    real = watch.read

    def read(cursors: dict[str, int], estimate: Any = ()) -> Any:
        asked.append(set(cursors))
        return real(cursors, estimate)

    monkeypatch.setattr(watch, "read", read)
    return asked


def running_job() -> str:
    job_id = enqueue("tests.api.jobs.greet", args=["Ada"]).id
    Job.objects.filter(pk=job_id).update(status=Status.RUNNING, attempts=1)
    return job_id


def follow(watcher: Watcher, job_id: str, cursor: int = 0) -> Stream:
    """A stream following ``job_id`` from chunk ``cursor``, once it had its first look."""
    stream = Stream()
    watcher.subscribe(job_id, cursor, stream.deliver)
    wait_for(lambda: stream.looks, 5, "the stream's first look")
    return stream


@pytest.mark.postgres_only
def test_a_signal_for_one_job_reads_it_and_wakes_only_its_streams(
    watcher: Watcher, reads: list[set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "RECHECK", 60.0)  # only signals make the watcher read
    a, b = running_job(), running_job()
    first_a, second_a, only_b = follow(watcher, a), follow(watcher, a), follow(watcher, b)
    before = len(reads)

    store(a, UNSET, 1, ["Hello"])  # as the progress writer writes, with its signal

    wait_for(lambda: second_a.texts() == ["Hello"], 5, "the chunk at A's second stream")
    assert first_a.texts() == ["Hello"]
    assert reads[before:] == [{a}]
    assert len(only_b.looks) == 1  # its first look only: B's stream was not woken


def test_a_change_without_a_signal_is_seen_by_the_periodic_look(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk written with no signal (as if the signal were lost): on PostgreSQL the
    wait's timeout (RECHECK) reads every watched job; on SQLite the poll sees the commit.
    Either way the stream gets it."""
    monkeypatch.setattr(watch, "RECHECK", 0.2)
    job_id = running_job()
    stream = follow(watcher, job_id)

    OutputChunk.objects.create(job_id=job_id, index=1, text="late")

    wait_for(lambda: stream.texts() == ["late"], 5, "the chunk, by the periodic look")


def test_a_failed_watcher_ends_its_streams_and_the_next_subscription_starts_another(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An error other than the database's (a bug in a read): the streams are not left
    waiting on a thread that is gone. Each is ended, without a look, so that its client
    reconnects; the reconnection is served by a new thread."""
    monkeypatch.setattr(watch, "RECHECK", 0.2)
    job_id = running_job()
    stream = follow(watcher, job_id)
    failed = watcher.thread
    real = watch.read

    def read_failing(cursors: dict[str, int], estimate: Any = ()) -> Any:
        raise RuntimeError("a bug in a read")

    monkeypatch.setattr(watch, "read", read_failing)
    OutputChunk.objects.create(job_id=job_id, index=1, text="while it failed")
    wait_for(lambda: stream.looks[-1:] == [None], 5, "the stream ended")
    assert "watcher failed" in caplog.text
    assert not watcher.subscriptions
    assert failed is not None
    failed.join(5)
    assert not failed.is_alive()

    monkeypatch.setattr(watch, "read", real)
    again = follow(watcher, job_id)
    wait_for(lambda: again.texts() == ["while it failed"], 5, "the chunk, on a new thread")
    assert watcher.thread is not failed


def test_each_stream_is_handed_only_what_it_has_not_seen() -> None:
    handed: dict[str, list[Look | None]] = {"new": [], "behind": []}
    new = Subscription("job", 0, handed["new"].append)
    behind = Subscription("job", 1, handed["behind"].append)
    look = Look("running", 1, {"done": 2}, None, None, [(1, "a"), (2, "b")])

    for subscription in (new, behind):
        subscription.hand(look)
        subscription.hand(look)  # the same again: nothing new
    moved = Look("complete", 1, {"done": 2}, "ab", None, [])
    new.hand(moved)

    assert [x.chunks for x in handed["new"] if x] == [[(1, "a"), (2, "b")], []]
    assert [x.chunks for x in handed["behind"] if x] == [[(2, "b")]]
    assert handed["new"][-1] == moved
    new.hand(None)
    assert handed["new"][-1] is None  # the job is gone: the stream ends


def test_output_longer_than_one_look_comes_over_several_and_then_the_end(
    watcher: Watcher,
) -> None:
    job_id = running_job()
    count = 2 * watch.CHUNKS_PER_LOOK + 50
    OutputChunk.objects.bulk_create(
        OutputChunk(job_id=job_id, index=n, text=f"{n} ") for n in range(1, count + 1)
    )
    Job.objects.filter(pk=job_id).update(
        status=Status.COMPLETE, result="done", finished_at=timezone.now()
    )
    stream = Stream()

    watcher.subscribe(job_id, 0, stream.deliver)

    wait_for(lambda: len(stream.texts()) == count, 5, "every chunk")
    looks = [look for look in stream.looks if look]
    assert [len(look.chunks) for look in looks] == [200, 200, 50]
    assert [look.more for look in looks] == [True, True, False]
    assert stream.texts() == [f"{n} " for n in range(1, count + 1)]


def test_a_job_deleted_ends_its_streams(watcher: Watcher, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "RECHECK", 0.2)
    job_id = running_job()
    stream = follow(watcher, job_id)

    Job.objects.filter(pk=job_id).delete()

    wait_for(lambda: stream.looks[-1] is None, 5, "the stream told the job is gone")


def test_the_watcher_ends_with_its_last_stream(watcher: Watcher) -> None:
    job_id = running_job()
    stream = Stream()
    subscription = watcher.subscribe(job_id, 0, stream.deliver)
    wait_for(lambda: stream.looks, 5, "the first look")

    watcher.unsubscribe(subscription)

    wait_for(lambda: watcher.thread is None, 5, "the watcher to end")

"""Progress and partial output: what a running job reports and streams, batched into few
writes, complete when its attempt ends, kept with the job and pruned with it.

The attempts run here, in process, as a worker runs them (``run_attempt``); the writer
thread writes on its own connection, so the tests commit (``transaction=True``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connection, connections
from django.db.backends.signals import connection_created
from django.test import override_settings
from django.utils import timezone

from django_ratequeue import (
    Handle,
    JobCanceled,
    JobDoesNotExist,
    JobFailed,
    NotInJob,
    Status,
    enqueue,
    get_handle,
    report_progress,
    stream_output,
)
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import progress
from django_ratequeue.engine.execution import run_attempt
from django_ratequeue.models import Attempt, Job, OutputChunk
from django_ratequeue.plugins.retention.pruning import prune
from tests.cluster import wait_for
from tests.queue import jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("background_threads_stop"),
]

WORDS = [f"word{n} " for n in range(1000)]


def run(handle: Handle[Any]) -> Attempt:
    """Run the job's next attempt here and now, as a worker runs one the loop handed it."""
    number = Attempt.objects.filter(job_id=handle.id).count() + 1
    Attempt.objects.create(
        job_id=handle.id, number=number, queue="default", dispatched_at=timezone.now()
    )
    attempt = Attempt.objects.select_related("job").get(job_id=handle.id, number=number)
    run_attempt(attempt)
    return attempt


def _configured() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.RATEQUEUE)


class Writes:
    """The statements that write progress or output, on every connection of the process."""

    def __init__(self) -> None:
        self.progress = 0
        self.output = 0
        self.lock = threading.Lock()

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        text = sql.lower()
        with self.lock:
            self.output += text.startswith('insert into "django_ratequeue_outputchunk"')
            self.progress += text.startswith('update "django_ratequeue_job" set "progress"')
        return execute(sql, *args)

    @property
    def total(self) -> int:
        return self.progress + self.output


@pytest.fixture
def writes() -> Iterator[Writes]:
    """Counts the writes of this thread and of the writer thread, which opens a new
    connection once the previous one has stopped (after a second of nothing to do)."""
    wait_for(lambda: progress._writer.thread is None, 10, "the writer thread to stop")
    counter = Writes()

    def watch(sender: Any, connection: Any, **kwargs: Any) -> None:
        if counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(counter)

    connection_created.connect(watch)
    connection.ensure_connection()
    watch(None, connection)
    try:
        yield counter
    finally:
        connection_created.disconnect(watch)
        connection.execute_wrappers.remove(counter)


def test_outside_a_job_they_say_so() -> None:
    with pytest.raises(NotInJob, match="reports on the job running it"):
        report_progress({"done": 1})
    with pytest.raises(NotInJob, match="stream_output"):
        stream_output("a word")


def test_a_job_streaming_a_thousand_chunks_writes_a_few_rows(writes: Writes) -> None:
    """With the interval longer than the job, the writer writes once at the first call
    and the end of the attempt writes the rest: two writes of each kind at most."""
    handle = jobs.stream_words.enqueue(WORDS)
    with override_settings(RATEQUEUE={**_configured(), "PROGRESS_INTERVAL": 60}):
        attempt = run(handle)

    assert attempt.outcome == "succeeded", attempt.error
    assert "".join(handle.output()) == "".join(WORDS)
    assert handle.progress() == {"done": 1000, "total": 1000}
    assert OutputChunk.objects.filter(job_id=handle.id).count() <= 2
    assert writes.output <= 2
    assert writes.progress <= 2


def test_writes_are_at_least_an_interval_apart(writes: Writes) -> None:
    handle = jobs.stream_words.enqueue(WORDS[:150], pause=0.002)
    began = time.monotonic()
    with override_settings(RATEQUEUE={**_configured(), "PROGRESS_INTERVAL": 0.05}):
        run(handle)
    elapsed = time.monotonic() - began

    assert "".join(handle.output()) == "".join(WORDS[:150])
    # One write when the first word came, one per interval after, and the attempt's last.
    most = elapsed / 0.05 + 2
    assert writes.output <= most
    assert writes.progress <= most
    assert writes.total < 150


def test_output_is_complete_when_the_attempt_ends_and_numbered_across_attempts() -> None:
    handle = jobs.stream_words.enqueue(["a ", "b "])
    run(handle)
    first = handle.output()
    run(handle)

    assert "".join(first) == "a b "
    assert "".join(handle.output()) == "a b a b "
    assert "".join(handle.output(since=len(first))) == "a b "
    indexes = list(
        OutputChunk.objects.filter(job_id=handle.id).order_by("index").values_list("index")
    )
    assert [index for (index,) in indexes] == list(range(1, len(indexes) + 1))


def test_what_was_reported_is_kept_not_what_the_job_changed_afterwards() -> None:
    handle = jobs.report_then_change.enqueue()
    run(handle)
    assert handle.progress() == {"step": "download"}


def test_a_job_that_never_reports_has_no_progress_nor_output() -> None:
    handle = jobs.add.enqueue(1, 2)
    run(handle)
    assert handle.progress() is None
    assert handle.output() == []


@pytest.mark.parametrize(
    ("case", "raised"),
    [
        ("progress list", "TypeError: report_progress() takes a dict"),
        (
            "progress nan",
            "ValueError: The job's progress must be JSON-serialisable (Out of range float",
        ),
        (
            "progress object",
            "ValueError: The job's progress must be JSON-serialisable (Object of type",
        ),
        ("progress nul", "ValueError: The job's progress must not contain NUL characters"),
        ("progress surrogate", "ValueError: The job's progress must be valid Unicode: it holds"),
        ("progress deep", "ValueError: The job's progress must not nest lists and objects"),
        ("progress big", 'is 209 bytes of JSON; the most is RATEQUEUE["MAX_PROGRESS_BYTES"]'),
        ("output bytes", "TypeError: stream_output() takes a str, not bytes"),
        ("output nul", "ValueError: The job's output must not contain NUL characters"),
        ("output surrogate", "ValueError: The job's output must be valid Unicode: it holds a"),
        ("output chunk", 'got 101 characters at once; the most is RATEQUEUE["MAX_OUTPUT_CHUNK'),
        ("output total", "ValueError: The job's output would exceed 250 characters"),
    ],
)
def test_bad_progress_and_output_are_refused_naming_the_rule(case: str, raised: str) -> None:
    handle = jobs.misreport.enqueue([case])
    limits = {"MAX_PROGRESS_BYTES": 200, "MAX_OUTPUT_CHUNK_LENGTH": 100, "MAX_OUTPUT_LENGTH": 250}
    with override_settings(RATEQUEUE={**_configured(), **limits}):
        attempt = run(handle)

    [message] = attempt.result
    assert raised in message
    # What was refused was not kept; what came before it was.
    assert handle.progress() is None
    assert "".join(handle.output()) == ("w" * 200 if case == "output total" else "")


def test_the_output_limit_counts_the_earlier_attempts() -> None:
    handle = jobs.stream_words.enqueue(["x" * 60])
    with override_settings(RATEQUEUE={**_configured(), "MAX_OUTPUT_LENGTH": 100}):
        run(handle)
        second = run(handle)
    assert second.outcome == "failed"
    assert "would exceed 100 characters" in second.error
    assert handle.output() == ["x" * 60]


def test_only_the_owner_reads_progress_and_output() -> None:
    owner = User.objects.create(username="ada")
    handle = jobs.stream_words.using(owner=owner).enqueue(["secret"])
    run(handle)

    assert get_handle(handle.id, owner=owner).output() == ["secret"]
    stranger = Handle(handle.id, owner=User.objects.create(username="eve"))
    with pytest.raises(JobDoesNotExist):
        stranger.output()
    with pytest.raises(JobDoesNotExist):
        stranger.progress()


@pytest.mark.parametrize("since", [-1, 1.5, "0", True])
def test_since_is_a_count_of_chunks(since: Any) -> None:
    handle = jobs.add.enqueue(1, 2)
    with pytest.raises(ValueError, match="since must be an integer, 0 or more"):
        handle.output(since=since)


def test_output_is_pruned_with_its_job() -> None:
    handle = jobs.stream_words.enqueue(["gone"])
    run(handle)
    finished = timezone.now() - timedelta(seconds=ratequeue_settings().RETENTION + 60)
    Job.objects.filter(pk=handle.id).update(status=Status.COMPLETE, finished_at=finished)

    assert prune() == 1
    assert not OutputChunk.objects.exists()


def test_a_result_is_awaited() -> None:
    done = jobs.add.enqueue(1, 2)
    Job.objects.filter(pk=done.id).update(status=Status.COMPLETE, result=3)
    failed = jobs.add.enqueue(1, 2)
    Job.objects.filter(pk=failed.id).update(status=Status.FAILED, error="ValueError: no")
    canceled = jobs.add.enqueue(1, 2)
    Job.objects.filter(pk=canceled.id).update(status=Status.CANCELED)
    waiting = jobs.add.enqueue(1, 2)

    assert asyncio.run(done.aresult()) == 3
    with pytest.raises(JobFailed, match="ValueError: no"):
        asyncio.run(failed.aresult(timeout=5))
    with pytest.raises(JobCanceled):
        asyncio.run(canceled.aresult())
    with pytest.raises(TimeoutError):
        asyncio.run(waiting.aresult(timeout=0.05))
    with pytest.raises(ValueError, match="timeout must be None"):
        asyncio.run(waiting.aresult(timeout=float("nan")))
    # The queries ran in asgiref's thread for sync code: close its connection.
    asyncio.run(sync_to_async(connections.close_all)())


def test_progress_and_output_are_seen_live_from_a_real_cluster(cluster: Any) -> None:
    cluster(workers=1)
    words = [f"w{n} " for n in range(40)]
    handle = enqueue(jobs.stream_words, args=[words], kwargs={"pause": 0.05})

    # Some output, and the progress that goes with it, before the job ends.
    partial = wait_for(lambda: handle.status() == Status.RUNNING and handle.output())
    assert handle.progress() is not None
    assert handle.result(timeout=30) == 40
    assert len("".join(partial)) < len("".join(words))
    assert "".join(handle.output()) == "".join(words)
    assert handle.progress() == {"done": 40, "total": 40}


def test_output_of_a_job_whose_row_is_gone_is_dropped_and_the_attempt_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ghost = Job(id="ghost", func="tests.queue.jobs.stream_words", args=[["a ", "b "]], kwargs={})
    attempt = Attempt(job=ghost)

    run_attempt(attempt)

    assert attempt.outcome == "succeeded", attempt.error
    assert attempt.result == 2
    assert not OutputChunk.objects.exists()
    assert "Dropped output of job 'ghost'" in caplog.text

"""``async def`` jobs: results, progress and output, failures and subtask waits from the
event loop their attempt runs on, in process (``run_pass``) and on a real cluster.

The async jobs' queries run in asgiref's thread for sync code, on a connection of its own:
the tests commit (``transaction=True``) and close that connection as they end.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from django_ratequeue import JobFailed, Status, enqueue, job
from django_ratequeue.engine.pool import Call, Pool
from django_ratequeue.engine.registry import is_async
from django_ratequeue.engine.subtasks import current_attempt
from django_ratequeue.intake.functions import AsyncJobFunction, JobFunction
from django_ratequeue.models import Job
from tests.queue import jobs
from tests.queue.steps import run_pass

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("background_threads_stop"),
]


def settle() -> None:
    """Run the attempts dispatched, then take their outcomes in (a second pass)."""
    run_pass()
    run_pass()


@pytest.fixture(autouse=True)
def close_sync_thread_connection() -> Iterator[None]:
    """Close the connection of asgiref's thread for sync code, which the jobs used."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


def test_an_async_job_runs_and_gives_its_awaited_result() -> None:
    assert isinstance(jobs.add_later, AsyncJobFunction)
    handle = jobs.add_later.enqueue(2, 3)
    by_path = enqueue("tests.queue.jobs.add_later", args=[4, 5])

    settle()

    assert handle.result(timeout=5) == 5
    assert by_path.result(timeout=5) == 9
    assert handle.status() == Status.COMPLETE
    # Called directly, it is the coroutine function it decorates.
    assert asyncio.run(jobs.add_later(1, 1)) == 2


def test_progress_and_output_from_an_async_job() -> None:
    words = [f"w{n} " for n in range(30)]
    handle = jobs.stream_words_later.enqueue(words)

    settle()

    assert handle.result(timeout=5) == 30
    assert "".join(handle.output()) == "".join(words)
    assert handle.progress() == {"done": 30, "total": 30}


def test_a_failing_async_job_keeps_its_error_and_traceback() -> None:
    handle = jobs.fail_later.using(retries=0).enqueue("async boom")

    settle()

    with pytest.raises(JobFailed, match="ValueError: async boom") as failed:
        handle.result(timeout=5)
    assert failed.value.exception_class_path == "builtins.ValueError"
    assert "in fail_later" in failed.value.traceback
    (attempt,) = handle.attempts()
    assert attempt.outcome == "failed"


def test_an_async_job_awaits_a_finished_subtask() -> None:
    child = jobs.add.enqueue(1, 1)
    settle()
    parent = jobs.await_job.enqueue(child.id)

    settle()

    assert parent.result(timeout=5) == 20


def test_an_async_wait_that_could_never_end_is_refused() -> None:
    handle = jobs.await_self.using(retries=3).enqueue()

    settle()

    with pytest.raises(JobFailed, match="RecursiveWaitDeadlock"):
        handle.result(timeout=5)
    assert len(handle.attempts()) == 1  # not retried: it would deadlock again


def test_the_blocking_result_inside_an_event_loop_says_to_await_aresult() -> None:
    done = jobs.add.enqueue(1, 2)
    settle()
    handle = jobs.block_on_result.using(retries=0).enqueue(done.id)

    settle()

    with pytest.raises(JobFailed, match=r"use `await handle\.aresult\(\)` instead"):
        handle.result(timeout=5)


def test_coroutine_functions_run_as_such_behind_partials_and_wrappers() -> None:
    async def double(x: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"x": 2 * x, "attempt": current_attempt.get()}

    @functools.wraps(double)
    def wrapped(x: int) -> Any:
        return double(x)

    def call_job(func: Any, args: list[Any]) -> Any:
        context = contextvars.copy_context()
        context.run(current_attempt.set, "the attempt")  # type: ignore[arg-type]
        call = Call("key", functools.partial(func, *args), is_async(func), None, context)
        return Pool(0, print).run_here(call).value

    assert call_job(double, [1]) == {"x": 2, "attempt": "the attempt"}
    assert call_job(functools.partial(double, 2), [])["x"] == 4
    assert call_job(wrapped, [3])["x"] == 6
    assert call_job(lambda x: x + 1, [1]) == 2


def test_decorating_an_async_job_again_keeps_it_async() -> None:
    copy = job(jobs.add_later, queue="later")
    assert isinstance(copy, AsyncJobFunction)
    assert isinstance(copy.using(priority=2), AsyncJobFunction)
    assert isinstance(jobs.add, JobFunction)
    assert not isinstance(jobs.add, AsyncJobFunction)


def test_aenqueue_from_async_code() -> None:
    async def enqueue_it() -> Any:
        return await jobs.add_later.aenqueue(20, 22)

    handle = asyncio.run(enqueue_it())
    settle()
    assert asyncio.run(handle.aresult(timeout=5)) == 42


def test_an_async_job_awaits_its_subtask_on_a_real_cluster(cluster: Any) -> None:
    # One slot in all: the child can only run because its waiting parent lends its slot.
    cluster(workers=2, MAX_CONCURRENCY=1)
    parent = jobs.await_subtask.enqueue(4)

    outcome = parent.result(timeout=60)

    assert outcome["value"] == 80
    assert outcome["ticks"] > 0  # the event loop went on while the parent waited
    assert Job.objects.filter(parent_id=parent.id).count() == 1
    assert jobs.add_later.enqueue(5, 6).result(timeout=30) == 11

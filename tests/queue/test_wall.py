"""The wall between job code and the engine: whatever a job hands back (tests/hostile.py),
its attempt ends with a clear error or a plain result, the attempts ending beside it are
reported as they ended, and its slot takes new work. In process, step by step, with a
runner and its slots; then on a real cluster (the remote worker's are in
tests/remote/test_wall.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_ratequeue import Handle, JobFailed, Status
from django_ratequeue.engine import runner as runner_module
from django_ratequeue.engine.models import Attempt
from django_ratequeue.engine.runner import Runner
from tests.cluster import Cluster, wait_for
from tests.hostile import EXPECTED, KINDS, OUTPUT
from tests.queue import hostile_jobs
from tests.queue.test_slots_runner import runner_with, serve_until

pytestmark = pytest.mark.django_db(transaction=True)

ENDED = (Status.COMPLETE, Status.FAILED)


@pytest.fixture(autouse=True)
def roomy(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_CONCURRENCY": 100, "MAX_RESULT_BYTES": 2**20}


def enqueue_catalogue() -> dict[tuple[str, bool], Handle[Any]]:
    """Enqueue every hostile kind, as a plain and as an ``async def`` job."""
    return {
        (kind, is_async): (
            hostile_jobs.hostile_async if is_async else hostile_jobs.hostile
        ).enqueue(kind)
        for kind in KINDS
        for is_async in (False, True)
    }


def ended_as_expected(
    kind: str, handle: Handle[Any], catalogue: dict[str, tuple[str, Any]] = EXPECTED
) -> None:
    """Assert that ``handle``'s job ended as ``catalogue`` says ``kind`` must."""
    expected, what = catalogue[kind]
    assert not Attempt.objects.filter(job_id=handle.id, ended_at=None).exists(), kind
    if expected == "complete":
        assert handle.status() == Status.COMPLETE, (kind, handle.attempts())
        assert handle.result(timeout=0) == what, kind
    else:
        with pytest.raises(JobFailed) as failed:
            handle.result(timeout=0)
        assert what in failed.value.error, (kind, failed.value.error[:300])
    assert handle.output() == OUTPUT.get(kind, []), kind


def all_ended(handles: list[Handle[Any]]) -> Callable[[], bool]:
    return lambda: all(handle.status() in ENDED for handle in handles)


def test_every_hostile_kind_ends_its_own_attempt_and_the_slots_go_on() -> None:
    assert len(KINDS) >= 30
    handles = enqueue_catalogue()
    innocent = [hostile_jobs.innocent.enqueue(f"innocent {n}") for n in range(4)]
    runner = runner_with(8)
    everything = [*handles.values(), *innocent]
    serve_until(runner, all_ended(everything), "every hostile job's end")
    for (kind, _is_async), handle in handles.items():
        ended_as_expected(kind, handle)
    assert [h.result(timeout=0) for h in innocent] == [f"innocent {n}" for n in range(4)]
    after = hostile_jobs.innocent.enqueue("after")
    runner.may_have_work = True  # as the WORK signal tells a serving runner
    serve_until(runner, all_ended([after]), "a job after the catalogue")
    assert after.result(timeout=0) == "after"
    assert runner.pool.free == 8


def test_one_attempt_whose_end_cannot_be_recorded_hides_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine error while recording one attempt's end fails that attempt alone."""
    doomed = hostile_jobs.innocent.enqueue("doomed")
    beside = [hostile_jobs.innocent.enqueue(f"beside {n}") for n in range(3)]
    real_finish = runner_module.finish

    def finish(attempt: Attempt, *args: Any) -> Any:
        if attempt.job_id == doomed.id:
            raise RuntimeError("an engine error")
        return real_finish(attempt, *args)

    monkeypatch.setattr(runner_module, "finish", finish)
    runner = runner_with(4)
    serve_until(runner, all_ended([doomed, *beside]), "the four ends")
    assert [h.result(timeout=0) for h in beside] == [f"beside {n}" for n in range(3)]
    with pytest.raises(JobFailed, match="could not be recorded: RuntimeError: an engine error"):
        doomed.result(timeout=0)
    assert not runner.held and not runner.unreported


def test_ends_a_failed_report_left_are_reported_on_the_next_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handles = [hostile_jobs.innocent.enqueue(f"job {n}") for n in range(3)]
    runner = runner_with(3)
    real_report = Runner.report
    failures = iter([True])

    def report(self: Runner, ended: Any) -> None:
        if ended and next(failures, False):
            raise ConnectionError("the database is away")
        real_report(self, ended)

    monkeypatch.setattr(Runner, "report", report)
    with pytest.raises(ConnectionError):
        serve_until(runner, lambda: False, "a report that fails")
    assert runner.unreported, "the failed report's attempts are kept"
    serve_until(runner, all_ended(handles), "the next turn's report")
    assert [h.result(timeout=0) for h in handles] == [f"job {n}" for n in range(3)]


def test_a_real_cluster_runs_the_catalogue_and_goes_on(cluster: Callable[..., Cluster]) -> None:
    cluster(workers=2, MAX_CONCURRENCY=100, MAX_RESULT_BYTES=2**20)
    handles = enqueue_catalogue()
    innocent = [hostile_jobs.innocent.enqueue(f"innocent {n}") for n in range(8)]
    wait_for(all_ended([*handles.values(), *innocent]), 120, "every job's end")
    for (kind, _is_async), handle in handles.items():
        ended_as_expected(kind, handle)
    after = [hostile_jobs.innocent.enqueue(f"after {n}") for n in range(4)]
    assert [h.result(timeout=60) for h in after] == [f"after {n}" for n in range(4)]

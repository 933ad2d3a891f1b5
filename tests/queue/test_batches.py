"""Batches step by step: one completion, exactly once, whatever ends when."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.db import connection as db_connection
from django.db.models import Max
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratequeue import (
    BatchDoesNotExist,
    Handle,
    Status,
    batch,
    enqueue,
    enqueue_many,
    get_batch,
)
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import FINAL_STATUSES
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Batch, Job
from django_ratequeue.plugins.batches import ends as batchends
from django_ratequeue.plugins.batches import models as batch_models
from django_ratequeue.plugins.batches.grouping import seal
from django_ratequeue.plugins.batches.models import UNFINISHED_STATUSES, batch_callback_id
from django_ratequeue.plugins.batches.scope import joining
from django_ratequeue.plugins.retention.pruning import prune
from tests.cluster import wait_for
from tests.queue import batch_jobs, jobs
from tests.queue.steps import Clock, freeze, leading_loop, run_pass

pytestmark = pytest.mark.django_db(transaction=True)
R = TypeVar("R")


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    return tmp_path / "callbacks.jsonl"


def outcomes(path: Path) -> list[dict[str, Any]]:
    """The outcomes the callback received, one per run of it."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_callbacks() -> None:
    """Step and run until nothing is left (the callback included)."""
    run_pass()
    run_pass()


def callback_rows(batch_id: str) -> int:
    return Job.objects.filter(pk=batch_callback_id(batch_id)).count()


def test_the_callback_runs_once_with_what_succeeded_and_failed(frozen: Clock, calls: Path):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        added = [jobs.add.enqueue(1, 2), jobs.add.enqueue(3, 4)]
        failed = enqueue(jobs.fail_hard)
    run_callbacks()
    run_callbacks()
    [outcome] = outcomes(calls)
    outcome["succeeded"].sort()
    assert outcome == {
        "batch_id": group.id,
        "total": 3,
        "succeeded": sorted(h.id for h in added),
        "failed": [failed.id],
        "canceled": [],
        "context": {"path": str(calls)},
    }
    assert {**group.result(timeout=0), "succeeded": outcome["succeeded"]} == outcome
    assert group.status()[Status.COMPLETE] == 2 and group.status()[Status.FAILED] == 1
    assert group.progress() == {"done": 3, "total": 3}
    assert {h.id for h in group.jobs()} == {*(h.id for h in added), failed.id}


def test_the_last_two_jobs_ending_in_one_step_finish_the_batch_once(frozen: Clock, calls: Path):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        jobs.add.enqueue(1, 1)
        jobs.add.enqueue(2, 2)
    loop = leading_loop()
    loop.step()  # both dispatched
    assert Runner(beat(force=True)).drain() == 2  # both attempts end before the next step
    assert not group.finished()
    loop.step()  # one step takes in both ends
    assert group.finished() and callback_rows(group.id) == 1
    loop.step()
    run_callbacks()
    assert len(outcomes(calls)) == 1 and outcomes(calls)[0]["total"] == 2


def test_a_job_added_while_the_last_one_ends_holds_the_batch_open(frozen: Clock, calls: Path):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        parent = batch_jobs.fan_out.enqueue(2)
    loop = leading_loop()
    loop.step()
    Runner(beat(force=True)).drain()  # the parent ran: it added two jobs, then ended
    loop.step()  # the parent's end is taken in: its children have not ended
    assert Job.objects.get(pk=parent.id).status == Status.COMPLETE
    assert not group.finished() and group.progress() == {"done": 1, "total": 3}
    run_callbacks()
    [outcome] = outcomes(calls)
    assert outcome["total"] == 3 and len(outcome["succeeded"]) == 3
    assert parent.id in outcome["succeeded"]


def test_a_cancel_during_the_end_finishes_the_batch_once(frozen: Clock, calls: Path):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        running = jobs.add.enqueue(1, 1)
        waiting = jobs.add.using(queue="later", run_after=3600).enqueue(2, 2)
    loop = leading_loop()
    loop.step()
    Runner(beat(force=True)).drain()  # `running` ended, its end not taken in yet
    group.cancel()
    loop.step()  # the cancel and the end in one step
    assert group.finished() and callback_rows(group.id) == 1
    assert Job.objects.get(pk=waiting.id).status == Status.CANCELED
    run_callbacks()
    [outcome] = outcomes(calls)
    # A cancel applied before the end was taken in wins: docs/concepts.md.
    assert sorted(outcome["canceled"]) == sorted([running.id, waiting.id])


def test_a_step_killed_before_the_callback_is_done_again(
    frozen: Clock, calls: Path, monkeypatch: pytest.MonkeyPatch
):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        only = jobs.add.enqueue(1, 1)
    loop = leading_loop()
    loop.step()
    Runner(beat(force=True)).drain()

    def killed(batch: Batch, now: Any) -> bool:
        raise KeyboardInterrupt("the loop's process was killed here")

    with monkeypatch.context() as patch:
        patch.setattr(batchends, "finish", killed)
        with pytest.raises(KeyboardInterrupt):
            loop.step()
    # The step's transaction rolled back: the job's end as well as the batch's.
    assert Job.objects.get(pk=only.id).status == Status.RUNNING
    assert not group.finished() and callback_rows(group.id) == 0
    leading_loop().step()
    assert group.finished() and callback_rows(group.id) == 1
    run_callbacks()
    assert len(outcomes(calls)) == 1


def test_a_batch_left_behind_is_found_by_the_sweep(
    frozen: Clock, calls: Path, monkeypatch: pytest.MonkeyPatch
):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        jobs.add.enqueue(1, 1)
    with monkeypatch.context() as patch:
        # A step that ended the last job but never looked at its batch.
        patch.setattr(batchends, "finished_batch_ids", lambda moves, start: set())
        patch.setattr(batchends, "sealed_unfinished", lambda: [])
        run_pass()
        run_pass()
    assert not group.finished()
    leading_loop().step()  # a new leader sweeps at its first step
    assert group.finished() and callback_rows(group.id) == 1
    run_callbacks()
    assert len(outcomes(calls)) == 1


def test_finishing_twice_finishes_once(frozen: Clock, calls: Path) -> None:
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        pass
    with transaction.atomic():
        assert batchends.finish_batches([group.id], frozen.now()) == []
        row = Batch.objects.get(pk=group.id)
        assert not batchends.finish(row, frozen.now())
    assert callback_rows(group.id) == 1


def test_an_empty_batch_finishes_when_sealed(frozen: Clock, calls: Path) -> None:
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        assert not group.finished()
    assert group.finished()
    run_callbacks()
    [outcome] = outcomes(calls)
    assert outcome["total"] == 0 and outcome["succeeded"] == []


def test_jobs_that_end_before_the_block_exits_finish_it_at_the_exit(frozen: Clock, calls: Path):
    with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
        jobs.add.enqueue(1, 1)
        run_pass()
        run_pass()
        assert group.progress() == {"done": 1, "total": 1}
        assert not group.finished()  # open: more jobs may come
    assert group.finished() and callback_rows(group.id) == 1
    run_callbacks()
    assert len(outcomes(calls)) == 1


def test_enqueue_many_makes_a_batch(frozen: Clock, calls: Path) -> None:
    assert jobs.add.enqueue_many([[3, 3]]).batch is None
    assert jobs.add.enqueue_many([[3, 3]], batch=True).batch is not None
    handles = enqueue_many(
        jobs.add,
        [[1, 1], [2, 2]],
        batch={"on_complete": batch_jobs.record_outcome, "context": {"path": str(calls)}},
        owner="alice",
    )
    assert handles.batch is not None
    assert Job.objects.filter(batch_id=handles.batch.id).count() == 2
    run_callbacks()
    run_callbacks()
    group = get_batch(handles.batch.id, owner="alice")
    assert sorted(group.result(timeout=0)["succeeded"]) == sorted(h.id for h in handles)
    assert Job.objects.get(pk=batch_callback_id(group.id)).owner == "alice"


def test_a_bad_item_writes_no_batch(frozen: Clock) -> None:
    with pytest.raises(ValueError):
        enqueue_many(jobs.add, [[1, 1], [float("nan"), 2]], batch=True)
    assert not Batch.objects.exists() and not Job.objects.exists()
    with pytest.raises(ValueError):
        batch(context={"bad": float("inf")})
    with pytest.raises(ValueError):
        enqueue_many(jobs.add, [[1, 1]], batch={"on_done": "x"})
    for owner in ("nul\x00", "lone \ud800", "x" * 256):
        with pytest.raises(ValueError, match="owner"):
            batch(owner=owner)
    assert not Batch.objects.exists()


def test_another_owner_sees_no_batch(frozen: Clock) -> None:
    with batch(owner="alice") as group:
        pass
    assert get_batch(group.id, owner="alice") == group
    for owner in ("mallory", None):
        with pytest.raises(BatchDoesNotExist):
            get_batch(group.id, owner=owner)


def test_jobs_join_a_batch_only_from_inside_it(frozen: Clock) -> None:
    with batch() as group:
        pass
    with pytest.raises(ValueError, match="only inside"), group.adding():
        pass


def test_result_waits_for_the_end(frozen: Clock) -> None:
    with batch() as group:
        jobs.add.enqueue(1, 1)
    with pytest.raises(TimeoutError, match="0 of its 1 jobs"):
        group.result(timeout=0)
    run_pass()
    run_pass()
    assert group.result(timeout=5)["total"] == 1


def test_a_batch_without_a_callback_finishes(frozen: Clock) -> None:
    with batch() as group:
        jobs.add.enqueue(1, 1)
    run_pass()
    run_pass()
    assert group.finished() and callback_rows(group.id) == 0
    assert Batch.objects.get(pk=group.id).total == 1


def test_finished_batches_are_pruned_after_retention(frozen: Clock) -> None:
    with batch() as finished:
        pass
    with batch() as running:
        jobs.add.enqueue(1, 1)
    Batch.objects.filter(pk=finished.id).update(
        finished_at=frozen.now() - timedelta(days=400), created_at=frozen.now()
    )
    prune()
    assert list(Batch.objects.values_list("pk", flat=True)) == [running.id]


def test_every_unfinished_status_sorts_after_every_final_one() -> None:
    # has_unfinished_jobs reads the highest status of a batch's jobs.
    assert min(UNFINISHED_STATUSES) > max(FINAL_STATUSES)


def test_a_batchs_jobs_are_read_through_the_partial_index() -> None:
    highest = batch_models.batch_jobs("some-batch").values("batch_id").annotate(h=Max("status"))
    sql, params = highest.values("h").query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "ratequeue_job_batch" in plan


def test_a_batch_can_be_opened_and_awaited_in_async_code(frozen: Clock) -> None:
    async def closing(work: Coroutine[Any, Any, R]) -> R:
        """Run ``work``, then close the connections sync_to_async's thread opened."""
        try:
            return await work
        finally:
            await sync_to_async(connections.close_all)()

    async def enqueue_in_a_batch() -> str:
        async with batch(owner="alice") as group:
            await sync_to_async(jobs.add.enqueue)(1, 1)
        with pytest.raises(TimeoutError):
            await group.aresult(timeout=0)
        return group.id

    batch_id = asyncio.run(closing(enqueue_in_a_batch()))
    run_callbacks()
    outcome = asyncio.run(closing(get_batch(batch_id, owner="alice").aresult(timeout=5)))
    assert outcome["total"] == 1 and len(outcome["succeeded"]) == 1


@pytest.mark.postgres_only
def test_a_job_added_and_sealed_between_the_look_and_the_lock_keeps_the_batch_open(
    frozen: Clock, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)})
    group = block.open()
    with joining(group.id):
        jobs.add.enqueue(1, 1)
    loop = leading_loop()
    loop.step()
    Runner(beat(force=True)).drain()
    look = batchends.has_unfinished_jobs
    added: list[str] = []

    def add_and_seal_elsewhere() -> None:
        with joining(group.id):
            added.append(jobs.add.enqueue(2, 2).id)
        seal(group.id)
        db_connection.close()

    def look_then_race(batch_id: str) -> bool:
        unfinished = look(batch_id)
        if not added and threading.current_thread() is threading.main_thread():
            # Another process adds the batch's last job and seals it, before the lock.
            racer = threading.Thread(target=add_and_seal_elsewhere)
            racer.start()
            racer.join()
        return unfinished

    monkeypatch.setattr(batchends, "has_unfinished_jobs", look_then_race)
    loop.step()  # ends the first job: all ended as it first looks, not once it holds the lock
    assert not group.finished() and callback_rows(group.id) == 0
    monkeypatch.undo()
    run_callbacks()
    [outcome] = outcomes(calls)
    assert outcome["total"] == 2 and added[0] in outcome["succeeded"]


def test_batches_on_a_real_cluster_call_back_once_each(cluster: Any, calls: Path) -> None:
    cluster()
    groups = []
    for number in range(3):
        with batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}) as group:
            batch_jobs.fan_out.enqueue(5)  # adds 5 more jobs to its batch while it runs
            jobs.add.enqueue_many([[number, n] for n in range(10)])
            enqueue(jobs.fail_hard)
        groups.append(group)
    finished = [group.result(timeout=60) for group in groups]
    wait_for(lambda: len(outcomes(calls)) >= 3, 30, "the three callbacks")
    by_batch = {outcome["batch_id"]: outcome for outcome in outcomes(calls)}
    assert len(outcomes(calls)) == 3 and set(by_batch) == {group.id for group in groups}
    for group, outcome in zip(groups, finished, strict=True):
        assert by_batch[group.id] == outcome
        assert outcome["total"] == 17 and len(outcome["succeeded"]) == 16
        assert len(outcome["failed"]) == 1 and outcome["canceled"] == []


OPERATIONS = st.lists(st.sampled_from(["add", "fail", "cancel", "run", "step", "seal"]))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=OPERATIONS.map(lambda ops: [*ops[:14], "seal", "run", "run", "run"]))
def test_a_batch_finishes_exactly_when_sealed_with_every_job_ended(
    frozen: Clock, calls: Path, operations: list[str]
) -> None:
    """Against the rule itself: after every operation, the batch is finished (with one
    callback) if and only if it is sealed and each of its jobs has ended."""
    group = batch(on_complete=batch_jobs.record_outcome, context={"path": str(calls)}).open()
    handles: list[Handle[Any]] = []
    sealed = False
    for operation in operations:
        if operation in ("add", "fail") and not sealed:
            with joining(group.id):
                call = jobs.add.using(retries=0) if operation == "add" else jobs.fail_hard
                handles.append(call.enqueue(1, 1) if operation == "add" else call.enqueue())
        elif operation == "cancel" and handles:
            handles[len(handles) // 2].cancel()
        elif operation == "run":
            run_pass()
        elif operation == "step":
            leading_loop().step()
        elif operation == "seal" and not sealed:
            seal(group.id)
            sealed = True
        ended = all(handle.status() in FINAL_STATUSES for handle in handles)
        assert group.finished() == (sealed and ended), operation
        assert callback_rows(group.id) == int(sealed and ended)
    assert group.finished()

"""A job moved by another writer between a loop step's read of it and its write.

Only the loop moves jobs, one step at a time, so this never happens with one leader. Each
of the step's job writes says which status it expects, and a step whose write finds a
job in another one rolls back whole, rather than start it twice or overwrite its end
(docs/concepts.md, "Partitions: the plan, and the guards it needs first"). The other
writer is played here by an UPDATE made in the step's own transaction just before the
step's write: what the step read is stale, as it would be after another leader's commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_ratequeue import enqueue
from django_ratequeue.engine import transitions
from django_ratequeue.engine.dispatch import Dispatch
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Status
from django_ratequeue.engine.runner import Runner
from django_ratequeue.exceptions import StepConflict
from django_ratequeue.models import Attempt, Job
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = pytest.mark.django_db(transaction=True)


def moved_first(job_id: str, status: Status, write: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``write``, run after job ``job_id`` was moved to ``status`` behind the step."""

    def moved_then_written(*args: Any, **kwargs: Any) -> Any:
        Job.objects.filter(pk=job_id).update(status=status)
        return write(*args, **kwargs)

    return moved_then_written


def test_a_job_canceled_under_a_step_is_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = enqueue(jobs.add, args=[1, 2]).id
    start = moved_first(job_id, Status.CANCELED, Dispatch.create_attempts)
    monkeypatch.setattr(Dispatch, "create_attempts", start)
    with pytest.raises(StepConflict, match="started 0 of the 1 jobs"):
        leading_loop().step()
    # The whole step rolled back, the other writer's change with it: nothing started.
    assert not Attempt.objects.exists()
    assert Job.objects.get(pk=job_id).status == Status.WAITING
    monkeypatch.undo()
    leading_loop().step()
    assert Job.objects.get(pk=job_id).status == Status.RUNNING


def test_a_job_moved_under_a_step_keeps_its_end_for_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = enqueue(jobs.add, args=[1, 2]).id
    loop = leading_loop()
    loop.step()
    assert Runner(beat(force=True)).drain() == 1
    finish = moved_first(job_id, Status.CANCELED, transitions.update_rows)
    monkeypatch.setattr(transitions, "update_rows", finish)
    with pytest.raises(StepConflict, match="wrote the outcome of 0 of the 1 jobs"):
        loop.step()
    # The attempt is still active and ended: the next step takes its end in.
    attempt = Attempt.objects.get(job_id=job_id)
    assert (attempt.active, attempt.outcome) == (True, "succeeded")
    monkeypatch.undo()
    loop.step()
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.result) == (Status.COMPLETE, 3)

"""Owners: a job enqueued for someone is visible to that someone only, through every read,
its callback included; an identity that many people would share is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User

from django_ratequeue import DuplicateJobId, Handle, Status, enqueue, enqueue_many, get_handle
from django_ratequeue.engine.handles import missing_job
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import CancelRequest, Job
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = pytest.mark.django_db

READS: dict[str, Callable[[Handle], Any]] = {
    "status": lambda handle: handle.status(),
    "result": lambda handle: handle.result(timeout=0),
    "attempts": lambda handle: handle.attempts(),
    "cancel": lambda handle: handle.cancel(),
}


@pytest.mark.parametrize("read", READS)
def test_another_owners_job_looks_like_no_job_to_every_read(read: str) -> None:
    mine = enqueue(jobs.add, args=[1, 2], owner="alice")
    unowned = enqueue(jobs.add, args=[1, 2])
    strangers = [
        (mine.id, Handle(mine.id, owner="mallory")),
        (mine.id, Handle(mine.id)),  # no owner is not a master key
        (unowned.id, Handle(unowned.id, owner="mallory")),
    ]
    for job_id, stranger in strangers:
        with pytest.raises(Job.DoesNotExist) as seen:
            READS[read](stranger)
        assert str(seen.value) == missing_job(job_id)
    assert not CancelRequest.objects.exists()
    # The owner (and, for an unowned job, a handle without owner) still sees its job.
    for own in (Handle(mine.id, owner="alice"), unowned):
        if read == "result":
            with pytest.raises(TimeoutError):
                READS[read](own)
        else:
            READS[read](own)


def test_get_handle_of_another_owners_job_is_as_for_a_missing_job() -> None:
    mine = enqueue(jobs.add, args=[1, 2], owner="alice")
    with pytest.raises(Job.DoesNotExist) as seen:
        get_handle(mine.id, owner="mallory")
    assert str(seen.value) == missing_job(mine.id)
    with pytest.raises(Job.DoesNotExist):
        get_handle(mine.id)
    assert get_handle(mine.id, owner="alice").status() == Status.WAITING


def test_a_user_owns_by_primary_key() -> None:
    alice = User.objects.create(username="alice")
    mine = enqueue(jobs.add, args=[1, 2], owner=alice)
    assert Job.objects.get(pk=mine.id).owner == f"auth.user:{alice.pk}"
    assert get_handle(mine.id, owner=alice).status() == Status.WAITING
    with pytest.raises(Job.DoesNotExist):
        get_handle(mine.id, owner=User.objects.create(username="bob"))


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (AnonymousUser(), "anonymous user cannot own a job"),
        (User(username="unsaved"), "unsaved User cannot own a job"),
    ],
)
def test_an_owner_shared_by_everyone_is_refused(owner: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        enqueue(jobs.add, args=[1, 2], owner=owner)
    with pytest.raises(ValueError, match=message):
        enqueue_many(jobs.add, [[1, 2]], owner=owner)
    assert not Job.objects.exists()
    unowned = enqueue(jobs.add, args=[1, 2])
    with pytest.raises(ValueError, match=message):
        get_handle(unowned.id, owner=owner)


def test_a_callback_job_belongs_to_the_owner_of_the_job_it_reports_on(tmp_path: Any) -> None:
    calls = str(tmp_path / "calls.jsonl")
    done = enqueue(
        jobs.add, args=[1, 2], owner="alice", on_complete=jobs.callback, context={"path": calls}
    )
    canceled = enqueue(
        jobs.add, args=[1, 2], owner="bob", on_complete=jobs.callback, context={"path": calls}
    )
    loop = leading_loop()
    canceled.cancel()
    loop.step()  # cancels bob's job (a callback) and dispatches alice's
    Runner("a-worker").drain()
    loop.step()  # takes alice's result in (a callback)
    assert (done.status(), canceled.status()) == (Status.COMPLETE, Status.CANCELED)
    callbacks = Job.objects.filter(func="tests.queue.jobs.callback")
    owners = {row.args[0]["job_id"]: row.owner for row in callbacks}
    assert owners == {done.id: "alice", canceled.id: "bob"}


def test_ignoring_a_duplicate_id_never_hands_out_another_owners_job() -> None:
    theirs = enqueue(jobs.add, args=[1, 2], id="report-7", owner="alice")
    again = enqueue(jobs.add, args=[1, 2], id="report-7", owner="alice", on_duplicate_id="ignore")
    assert again == theirs
    for owner in ("mallory", None):
        with pytest.raises(DuplicateJobId, match="report-7"):
            enqueue(jobs.add, args=[9, 9], id="report-7", owner=owner, on_duplicate_id="ignore")
    assert Job.objects.get().args == [1, 2]


def test_enqueue_many_ignoring_duplicate_ids_never_hands_out_another_owners_jobs() -> None:
    enqueue(jobs.add, args=[1, 2], id="batch-1", owner="alice")
    mine = enqueue_many(
        jobs.add, [[1, 2], [3, 4]], id="batch", owner="alice", on_duplicate_id="ignore"
    )
    assert [h.id for h in mine] == ["batch-0", "batch-1"]  # batch-1 was alice's already
    with pytest.raises(DuplicateJobId, match="batch-"):
        enqueue_many(jobs.add, [[1, 2], [3, 4], [5, 6]], id="batch", on_duplicate_id="ignore")
    assert Job.objects.count() == 2

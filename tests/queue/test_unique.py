"""unique_for and debounce, step by step with a frozen clock: windows, bursts, starts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_ratequeue import DuplicateJobId, Status, enqueue, enqueue_many, job
from django_ratequeue.engine.models import JobQuerySet
from django_ratequeue.engine.transitions import promote_due
from django_ratequeue.models import Job, UniqueClaim
from django_ratequeue.plugins.retention.pruning import prune
from django_ratequeue.plugins.unique.claims import CLAIM_GRACE, prune_claims
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, run_pass

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


@job(unique_for=timedelta(minutes=1))
def once_a_minute(x: int) -> int:
    return x


@job(debounce=10, unique_key="reindex")
def reindex(version: int) -> int:
    return version


def run_and_settle() -> None:
    """Run what is due, then let the loop take the attempts' ends in."""
    run_pass()
    run_pass()


def statuses() -> list[tuple[str, Status]]:
    return list(Job.objects.order_by("created_at").values_list("id", "status"))


# unique_for


def test_a_second_enqueue_within_the_window_returns_the_first_handle(frozen: Clock) -> None:
    first = once_a_minute.enqueue(1)
    frozen.advance(59)
    again = once_a_minute.enqueue(1)
    assert again.id == first.id
    assert Job.objects.count() == 1
    assert once_a_minute.enqueue(2).id != first.id  # other arguments, another key


def test_the_window_expires_and_a_new_job_takes_the_key_over(frozen: Clock) -> None:
    first = once_a_minute.enqueue(1)
    frozen.advance(60)
    second = once_a_minute.enqueue(1)
    assert second.id != first.id
    frozen.advance(30)
    assert once_a_minute.enqueue(1).id == second.id  # the new window counts from then
    assert UniqueClaim.objects.get().job_id == second.id


def test_a_finished_job_still_answers_within_its_window(frozen: Clock) -> None:
    first = once_a_minute.enqueue(7)
    run_and_settle()
    assert first.result(timeout=0) == 7
    frozen.advance(30)
    again = once_a_minute.enqueue(7)
    assert again.id == first.id and again.status() == Status.COMPLETE
    assert again.result(timeout=0) == 7
    assert Job.objects.count() == 1


def test_the_default_key_is_the_call_whatever_the_keyword_order(frozen: Clock) -> None:
    options: dict[str, Any] = {"unique_for": 60}
    first = enqueue(jobs.echo, kwargs={"a": 1, "b": {"y": 2, "x": 1}}, **options)
    same = enqueue(jobs.echo, kwargs={"b": {"x": 1, "y": 2}, "a": 1}, **options)
    assert same.id == first.id
    assert enqueue(jobs.echo, args=[1], **options).id != first.id
    assert enqueue(jobs.add, kwargs={"a": 1, "b": 2}, **options).id != first.id  # function


def test_a_unique_key_groups_calls_with_other_arguments(frozen: Clock) -> None:
    first = jobs.echo.using(unique_for=60, unique_key="user-5").enqueue(1)
    assert jobs.echo.using(unique_for=60, unique_key="user-5").enqueue(2).id == first.id
    assert Job.objects.get().args == [1]  # nothing written: the first call stands


def test_owners_never_share_a_key(frozen: Clock) -> None:
    mine = enqueue(jobs.add, args=[1, 2], unique_for=60, owner="ann")
    theirs = enqueue(jobs.add, args=[1, 2], unique_for=60, owner="bob")
    assert mine.id != theirs.id


def test_a_rolled_back_enqueue_leaves_no_claim(frozen: Clock) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        once_a_minute.enqueue(1)
        raise ZeroDivisionError
    assert not UniqueClaim.objects.exists()
    once_a_minute.enqueue(1)
    assert Job.objects.count() == 1


def test_enqueue_many_claims_each_item_in_order(frozen: Clock) -> None:
    earlier = once_a_minute.enqueue(1)
    handles = once_a_minute.enqueue_many([1, 2, 2, 3])
    assert handles[0].id == earlier.id
    assert handles[1].id == handles[2].id != earlier.id
    assert len({h.id for h in handles}) == 3
    assert Job.objects.count() == 3


def test_a_custom_id_names_the_job_a_window_writes(frozen: Clock) -> None:
    first = once_a_minute.using(id="digest").enqueue(1)
    assert first.id == "digest"
    assert once_a_minute.using(id="other").enqueue(1).id == "digest"  # within the window
    frozen.advance(60)
    with pytest.raises(DuplicateJobId):  # a new window, but the id is taken
        once_a_minute.using(id="digest").enqueue(1)
    assert UniqueClaim.objects.get().job_id == "digest"  # the refused claim rolled back
    kept = once_a_minute.using(id="digest", on_duplicate_id="ignore").enqueue(1)
    assert kept.id == "digest" and Job.objects.count() == 1


def test_enqueue_many_with_an_id_and_a_window(frozen: Clock) -> None:
    handles = once_a_minute.enqueue_many([1, 1, 2], id="batch")
    assert [h.id for h in handles] == ["batch-0", "batch-0", "batch-2"]
    with pytest.raises(DuplicateJobId):
        once_a_minute.enqueue_many([3, 2], id="batch")  # batch-0 is taken
    assert Job.objects.count() == 2
    again = once_a_minute.enqueue_many([3, 2], id="batch", on_duplicate_id="ignore")
    assert [h.id for h in again] == ["batch-0", "batch-2"]


# debounce


def test_a_burst_runs_once_with_the_last_arguments_after_it_goes_quiet(frozen: Clock) -> None:
    first = reindex.enqueue(1)
    assert first.status() == Status.SCHEDULED
    for version in (2, 3, 4):
        frozen.advance(5)
        assert reindex.enqueue(version).id == first.id
    row = Job.objects.get()
    assert row.args == [4] and row.start_at == frozen.now() + timedelta(seconds=10)
    frozen.advance(9)
    run_pass()
    assert first.status() == Status.SCHEDULED  # pushed back: not yet
    frozen.advance(1)
    run_and_settle()
    assert first.result(timeout=0) == 4
    assert Job.objects.count() == 1


def test_a_shorter_debounce_never_moves_a_start_earlier(frozen: Clock) -> None:
    first = reindex.enqueue(1)
    start = Job.objects.get().start_at
    frozen.advance(1)
    assert reindex.using(debounce=2).enqueue(2).id == first.id
    assert Job.objects.get().start_at == start and Job.objects.get().args == [2]
    assert reindex.using(debounce=60).enqueue(3).id == first.id
    assert Job.objects.get().start_at == frozen.now() + timedelta(seconds=60)


def test_a_call_after_the_job_started_makes_a_new_job(frozen: Clock) -> None:
    first = reindex.enqueue(1)
    frozen.advance(10)
    run_and_settle()
    assert first.status() == Status.COMPLETE
    second = reindex.enqueue(2)
    assert second.id != first.id and second.status() == Status.SCHEDULED
    assert reindex.enqueue(3).id == second.id
    assert UniqueClaim.objects.get().job_id == second.id


def test_a_due_job_not_promoted_yet_still_takes_the_burst(frozen: Clock) -> None:
    first = reindex.enqueue(1)
    frozen.advance(60)  # due, but the loop has not run
    assert reindex.enqueue(2).id == first.id
    assert Job.objects.get().start_at == frozen.now() + timedelta(seconds=10)


def test_a_debounce_between_the_loops_read_and_its_promotion_wins(
    frozen: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop read the job as due; a debounce pushed it back before its UPDATE."""
    first = reindex.enqueue(1)
    frozen.advance(10)
    promote = JobQuerySet.promote

    def debounce_then_promote(queryset: JobQuerySet) -> int:
        reindex.enqueue(2)
        return promote(queryset)

    monkeypatch.setattr(JobQuerySet, "promote", debounce_then_promote)
    assert promote_due(frozen.now()) == 0
    assert first.status() == Status.SCHEDULED
    assert Job.objects.get().args == [2]


def test_a_debounce_after_the_promotion_makes_a_new_job(frozen: Clock) -> None:
    first = reindex.enqueue(1)
    frozen.advance(10)
    assert promote_due(frozen.now()) == 1
    assert first.status() == Status.WAITING
    second = reindex.enqueue(2)
    assert second.id != first.id
    assert [status for _id, status in statuses()] == [Status.WAITING, Status.SCHEDULED]


def test_a_canceled_job_takes_no_more_of_the_burst(frozen: Clock) -> None:
    first = reindex.enqueue(1)
    first.cancel()
    run_pass()
    assert first.status() == Status.CANCELED
    assert reindex.enqueue(2).id != first.id


def test_enqueue_many_debounces_into_one_job(frozen: Clock) -> None:
    handles = reindex.enqueue_many([1, 2, 3])
    assert len({h.id for h in handles}) == 1
    assert Job.objects.get().args == [3]


# cost and retention


def test_an_enqueue_without_these_options_asks_nothing_more(frozen: Clock) -> None:
    for _ in range(2):  # PostgreSQL prepares the INSERT at its second use
        jobs.add.enqueue(1, 2)
    with CaptureQueriesContext(connection) as plain:
        jobs.add.enqueue(1, 2)
    assert len(plain) == 1
    assert not UniqueClaim.objects.exists()


def test_claims_expired_past_the_grace_are_pruned(frozen: Clock) -> None:
    grace = CLAIM_GRACE.total_seconds()
    once_a_minute.enqueue(1)  # claimed for 60 s
    reindex.enqueue(1)  # claimed until its start, in 10 s
    frozen.advance(10 + grace)
    assert prune_claims() == 0
    frozen.advance(1)
    assert prune_claims() == 1  # the debounce's
    kept = once_a_minute.enqueue(2)
    frozen.advance(50)
    assert prune_claims(limit=5) == 1  # the first window's
    prune()
    assert list(UniqueClaim.objects.values_list("job_id", flat=True)) == [kept.id]


# bad input


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_for": float("inf")}, "unique_for must be more than 0"),
        ({"unique_for": float("nan")}, "unique_for must be more than 0"),
        ({"unique_for": -1}, "unique_for must be more than 0"),
        ({"unique_for": 0}, "unique_for must be more than 0"),
        ({"unique_for": 10**400}, "unique_for must be more than 0"),
        ({"unique_for": timedelta(days=366)}, "unique_for must be more than 0"),
        ({"unique_for": True}, "unique_for must be a number of seconds"),
        ({"unique_for": "60"}, "unique_for must be a number of seconds"),
        ({"debounce": float("-inf")}, "debounce must be more than 0"),
        ({"debounce": False}, "debounce must be a number of seconds"),
        ({"debounce": 1e300}, "debounce must be more than 0"),
        ({"unique_for": 60, "unique_key": ""}, "unique_key must be a non-empty string"),
        ({"unique_for": 60, "unique_key": 5}, "unique_key must be a non-empty string"),
        ({"unique_for": 60, "unique_key": "k" * 1001}, "unique_key must be a non-empty"),
        ({"unique_for": 60, "unique_key": "a\x00b"}, "unique_key must not contain NUL"),
        ({"unique_for": 60, "unique_key": "\udce9"}, "unique_key must be valid Unicode"),
        ({"unique_key": "k"}, "unique_key needs unique_for or debounce"),
        ({"unique_for": 60, "debounce": 5}, "Give unique_for or debounce, not both"),
        ({"debounce": 5, "id": "x"}, "Give id or debounce"),
        ({"debounce": 5, "run_after": 5}, "give debounce or start_at/run_after"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        enqueue(jobs.add, args=[1, 2], **options)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        enqueue_many(jobs.add, [[1, 2]], **options)
    assert not Job.objects.exists() and not UniqueClaim.objects.exists()


def test_retention_keeps_a_finished_job_while_its_window_lasts(
    frozen: Clock, settings: Any
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "RETENTION": 0}
    first = once_a_minute.enqueue(3)
    other = jobs.add.enqueue(1, 2)
    run_and_settle()
    frozen.advance(30)
    prune()
    assert list(Job.objects.values_list("id", flat=True)) == [first.id]  # not the other
    assert once_a_minute.enqueue(3).result(timeout=0) == 3
    frozen.advance(31)
    prune()
    assert not Job.objects.exists()
    assert other.id != first.id


def test_without_returning_the_holder_is_read(
    frozen: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.35 has no RETURNING: the claim is read after the upsert."""
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    first = once_a_minute.enqueue(1)
    assert once_a_minute.enqueue(1).id == first.id
    frozen.advance(60)
    assert once_a_minute.enqueue(1).id != first.id
    burst = reindex.enqueue(1)
    assert reindex.enqueue(2).id == burst.id
    assert Job.objects.get(pk=burst.id).args == [2]

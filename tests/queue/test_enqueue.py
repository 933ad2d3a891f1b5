"""Enqueue without a cluster: what gets written, and bad input that writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ratequeue import (
    DuplicateJobId,
    Handle,
    Retry,
    Status,
    enqueue,
    enqueue_many,
    get_handle,
    job,
)
from django_ratequeue.models import CancelRequest, Job
from tests.queue import jobs

pytestmark = pytest.mark.django_db


def only_job() -> Job:
    (row,) = Job.objects.all()
    return row


def test_enqueue_writes_a_waiting_job_with_its_arguments() -> None:
    handle = enqueue(jobs.add, args=[2], kwargs={"b": 3})
    row = only_job()
    assert (row.id, row.func, row.args, row.kwargs) == (
        handle.id,
        "tests.queue.jobs.add",
        [2],
        {"b": 3},
    )
    assert (row.status, row.queue, row.priority) == (Status.WAITING, "default", 0)
    assert handle.status() == Status.WAITING
    assert Retry(**row.retry) == Retry()


def test_options_go_to_enqueue_and_arguments_through_args_and_kwargs() -> None:
    enqueue(jobs.echo, args=[1], kwargs={"x": 1}, queue="emails", priority=5)
    row = only_job()
    assert (row.queue, row.priority, row.args, row.kwargs) == ("emails", 5, [1], {"x": 1})


def test_nothing_is_told_apart_by_its_name() -> None:
    """A keyword is an option or an argument by where it is passed, never by its name,
    whatever parameters the function declares."""
    enqueue(jobs.route, queue="emails")  # route declares ``queue``: still the option
    enqueue(jobs.route, args=["x"])  # and ``args``: still its positional arguments
    enqueue(jobs.echo, kwargs={"queue": "q", "args": [1], "retries": 9})
    jobs.route.enqueue(queue="q", args=[2])
    jobs.echo.using(priority=3).enqueue(priority=4)
    rows = Job.objects.order_by("created_at")
    assert [(r.queue, r.priority, r.args, r.kwargs) for r in rows] == [
        ("emails", 0, [], {}),
        ("default", 0, ["x"], {}),
        ("default", 0, [], {"queue": "q", "args": [1], "retries": 9}),
        ("default", 0, [], {"queue": "q", "args": [2]}),
        ("default", 3, [], {"priority": 4}),
    ]
    assert rows[2].retry["retry_count"] == Retry().retry_count


def test_positional_arguments_to_enqueue_are_refused() -> None:
    with pytest.raises(
        TypeError, match=r"args=\[\.\.\.\] and kwargs=\{\.\.\.\}.*\.enqueue\(1, 2\)"
    ):
        enqueue(jobs.add, 1, 2)  # type: ignore[call-overload]
    assert not Job.objects.exists()


def test_explicit_args_and_kwargs_form() -> None:
    enqueue("tests.queue.jobs.add", args=[1], kwargs={"b": 2}, retries=0, timeout=3)
    row = only_job()
    assert (row.args, row.kwargs, row.retry["retry_count"], row.timeout) == ([1], {"b": 2}, 0, 3.0)


def test_job_decorator_defaults_and_using() -> None:
    jobs.decorated.enqueue(4)
    jobs.decorated.using(queue={"name": "wide", "max_concurrency": 7}, priority=-1).enqueue(5)
    first, second = Job.objects.order_by("created_at")
    assert (first.queue, first.retry["retry_count"], first.timeout) == ("decorated", 2, 30.0)
    assert (second.queue, second.max_concurrency, second.priority) == ("wide", 7, -1)
    assert jobs.decorated(3) == 6  # still callable in place


def test_every_option_reads_back_as_given_on_both_insert_paths() -> None:
    """A plain enqueue sends its options as literals in a prepared INSERT; one with an id
    saves a model. Both must store the same row, quotes and backslashes included."""
    options = {
        "queue": {"name": "it's \\ odd", "max_concurrency": 3},
        "concurrency_key": "tenant 'x' \\ ü",
        "priority": -7,
        "retries": {"retry_count": 2, "initial_interval": 0.5},
        "timeout": 2.5,
        "on_complete": jobs.callback,
        "context": {"quote": "'\"", "nested": [1, None, 2.5, "ü"]},
        "owner": "user:1",
        "cost": 4,
        "run_after": 60,
    }
    plain = enqueue(jobs.echo, args=["a'b"], kwargs={"k": "\\"}, **options)
    saved = enqueue(jobs.echo, args=["a'b"], kwargs={"k": "\\"}, id="chosen", **options)
    first, second = (Job.objects.get(pk=handle.id) for handle in (plain, saved))
    # Each enqueue has its own span when OpenTelemetry traces (docs/tracing.md).
    differing = {"id", "created_at", "start_at", "traceparent"}
    names = [f.attname for f in Job._meta.concrete_fields if f.attname not in differing]
    assert [getattr(first, n) for n in names] == [getattr(second, n) for n in names]
    assert (first.queue, first.concurrency_key, first.context) == (
        "it's \\ odd",
        "tenant 'x' \\ ü",
        options["context"],
    )
    assert (first.args, first.kwargs, first.status) == (["a'b"], {"k": "\\"}, Status.SCHEDULED)
    assert first.start_at - first.created_at == timedelta(seconds=60)


def test_a_functions_options_are_checked_again_when_the_settings_change() -> None:
    wide = jobs.decorated.using(queue={"name": "wide", "max_concurrency": 5})
    wide.enqueue(1)
    with (
        override_settings(RATEQUEUE={"MAX_QUEUE_CONCURRENCY": 2}),
        pytest.raises(ValueError, match="MAX_QUEUE_CONCURRENCY"),
    ):
        wide.enqueue(2)
    with override_settings(RATEQUEUE={"DEFAULT_RETRIES": 1}):
        enqueue(jobs.add, args=[1, 2])
    assert [row.retry["retry_count"] for row in Job.objects.order_by("created_at")] == [2, 1]


def test_start_at_makes_a_scheduled_job() -> None:
    later = timezone.now() + timedelta(hours=1)
    enqueue(jobs.add, args=[1, 2], start_at=later.isoformat())
    enqueue(jobs.add, args=[1, 2], run_after=timedelta(minutes=5))
    enqueue(jobs.add, args=[1, 2], start_at=datetime(2000, 1, 1, tzinfo=UTC))
    statuses = sorted(Job.objects.values_list("status", flat=True))
    assert statuses == [Status.SCHEDULED, Status.SCHEDULED, Status.WAITING]


def test_retries_accept_int_dict_and_retry() -> None:
    enqueue(jobs.add, args=[1, 2], retries=2)
    enqueue(jobs.add, args=[1, 2], retries={"retry_count": 1, "initial_interval": 30})
    enqueue(jobs.add, args=[1, 2], retries=Retry(retry_count=4, randomize_interval=False))
    counts = sorted(r["retry_count"] for r in Job.objects.values_list("retry", flat=True))
    assert counts == [1, 2, 4]


def test_custom_id_and_duplicates() -> None:
    handle = enqueue(jobs.add, args=[1, 2], id="invoice-7")
    assert handle.id == "invoice-7"
    with pytest.raises(DuplicateJobId, match="invoice-7"):
        enqueue(jobs.add, args=[1, 2], id="invoice-7")
    again = enqueue(jobs.add, args=[9, 9], id="invoice-7", on_duplicate_id="ignore")
    assert again == handle
    assert only_job().args == [1, 2]


def test_an_enqueue_with_an_id_is_one_statement_taken_or_not() -> None:
    """No savepoint around it, even in a transaction (the loop enqueues schedules' runs so):
    a taken id inserts nothing, then one read says whose job holds it."""
    enqueue(jobs.add, args=[0, 0])  # the clock's first reading of the database's
    Job.objects.all().delete()
    queries = CaptureQueriesContext(connection)
    with transaction.atomic(), queries:
        enqueue(jobs.add, args=[1, 2], id="invoice-8")
    assert len(queries) == 1
    with transaction.atomic(), queries:
        again = enqueue(jobs.add, args=[3, 4], id="invoice-8", on_duplicate_id="ignore")
        with pytest.raises(DuplicateJobId):  # the transaction goes on after it
            enqueue(jobs.add, args=[3, 4], id="invoice-8")
        assert Job.objects.count() == 1
    assert again.id == "invoice-8"
    assert only_job().args == [1, 2]
    assert not [q["sql"] for q in queries if "SAVEPOINT" in q["sql"].upper()]


def test_enqueue_many_gives_indexed_ids_and_one_job_per_item() -> None:
    handles = enqueue_many(jobs.add, [[1, 2], {"a": 3, "b": 4}, (5, 6)], id="batch", retries=1)
    assert [h.id for h in handles] == ["batch-0", "batch-1", "batch-2"]
    rows = Job.objects.order_by("created_at")
    assert [(r.args, r.kwargs) for r in rows] == [
        ([1, 2], {}),
        ([], {"a": 3, "b": 4}),
        ([5, 6], {}),
    ]
    assert {r.retry["retry_count"] for r in rows} == {1}


def test_enqueue_many_is_all_or_nothing() -> None:
    with pytest.raises(ValueError, match="JSON"):
        enqueue_many(jobs.echo, [[1], [object()]])
    enqueue(jobs.add, args=[1, 2], id="b-1")
    with pytest.raises(DuplicateJobId):
        enqueue_many(jobs.add, [[1, 2], [3, 4]], id="b")
    assert Job.objects.count() == 1


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue(jobs.add, args=[1, 2])
        raise RuntimeError("request failed")
    assert not Job.objects.exists()


def local_function() -> None:
    def inner() -> None: ...

    return inner  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: enqueue("tests.queue.jobs.nope"), "Unknown job function 'tests.queue.jobs.nope'"),
        (lambda: enqueue("not_a_module_at_all.f"), "Unknown job function"),
        (lambda: enqueue(lambda: None), "not a module-level function"),
        (lambda: enqueue(local_function()), "not a module-level function"),
        (lambda: enqueue(jobs.echo, args=[object()]), "arguments must be JSON-serialisable"),
        (
            lambda: enqueue(jobs.echo, kwargs={"when": datetime.now()}),
            "keyword arguments must be JSON",
        ),
        (lambda: enqueue(jobs.echo, args=[float("nan")]), "JSON"),
        (lambda: enqueue(jobs.add, args=[1, 2], context={1, 2}), "context must be JSON"),
        (lambda: enqueue(jobs.add, args=[1, 2], start_at="next tuesday"), "ISO-8601"),
        (lambda: enqueue(jobs.add, args=[1, 2], start_at=5), "start_at must be"),
        (lambda: enqueue(jobs.add, args=[1, 2], retries=-1), "retries must be an integer from 0"),
        (lambda: enqueue(jobs.add, args=[1, 2], retries={"tries": 3}), "Unknown retries"),
        (lambda: enqueue(jobs.add, args=[1, 2], retries="many"), "retries must be"),
        (lambda: enqueue(jobs.add, args=[1, 2], timeout=-1), "timeout must be more than 0"),
        (lambda: enqueue(jobs.add, args=[1, 2], run_after=-5), "run_after must be 0 or more"),
        (
            lambda: enqueue(jobs.add, args=[1, 2], queue={"name": "q", "max_concurrency": 101}),
            "MAX_QUEUE_CONCURRENCY",
        ),
        (
            lambda: enqueue(jobs.add, args=[1, 2], queue={"name": "q", "max_concurrency": -1}),
            "from 0",
        ),
        (lambda: enqueue(jobs.add, args=[1, 2], queue=""), "queue name"),
        (lambda: enqueue(jobs.add, args=[1, 2], priority="high"), "priority must be an integer"),
        (lambda: enqueue(jobs.add, args=[1, 2], on_duplicate_id="replace"), "on_duplicate_id"),
        (lambda: enqueue(jobs.add, args=[1, 2], on_complete="x.y.z"), "Unknown on_complete"),
        (lambda: enqueue(jobs.add, args="12"), "args must be a list or tuple"),
        (lambda: enqueue(jobs.add, kwargs=[("a", 1)]), "kwargs must be a dict"),
        (lambda: jobs.decorated.using(colour="blue"), "Unknown enqueue option"),
        (
            lambda: enqueue(jobs.add, args=[1], start_at=timezone.now(), run_after=1),
            "not both",
        ),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]
    assert not Job.objects.exists()


def test_get_handle_of_unknown_job() -> None:
    with pytest.raises(Job.DoesNotExist, match=r"no job with id 'missing'.*pruned"):
        get_handle("missing")


def test_a_handle_whose_job_was_pruned_says_so() -> None:
    handle = enqueue(jobs.add, args=[1, 2])
    Job.objects.filter(pk=handle.id).delete()
    for read in (handle.status, handle.result, handle.attempts):
        with pytest.raises(Job.DoesNotExist, match=r"no job with id .*RETENTION"):
            read()


def test_job_decorator_with_and_without_arguments() -> None:
    assert job(jobs.add).options.values == {}
    assert job(queue="x")(jobs.add).options.values == {"queue": "x"}


def test_backoff_grows_and_is_capped() -> None:
    policy = Retry(initial_interval=1, backoff_factor=2, max_interval=5, randomize_interval=False)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    jittered = Retry()
    for n in range(1, 8):
        assert jittered.delay(n) < jittered.delay(n + 1)


def test_only_the_owner_may_cancel_or_read_attempts() -> None:
    handle = enqueue(jobs.add, args=[1, 2], owner="alice")
    stranger = Handle(handle.id, owner="mallory")
    with pytest.raises(Job.DoesNotExist):
        stranger.cancel()
    with pytest.raises(Job.DoesNotExist):
        stranger.attempts()
    assert not CancelRequest.objects.exists()
    get_handle(handle.id, owner="alice").cancel()
    assert CancelRequest.objects.filter(job_id=handle.id).count() == 1

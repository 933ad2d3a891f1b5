"""A call that does not fit its job function is refused at enqueue, as calling the function
would refuse it, and nothing is written: in Python and over HTTP, by one check."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_ratequeue import Status, enqueue, enqueue_many
from django_ratequeue.api.enqueueing import call_problem
from django_ratequeue.engine.registry import registered_job
from django_ratequeue.models import Job
from tests.integration.test_queue_admin import run_action
from tests.queue import jobs

pytestmark = pytest.mark.django_db

ADD = "tests.queue.jobs.add"


def test_missing_arguments_are_refused_naming_them() -> None:
    with pytest.raises(TypeError) as refused:
        jobs.add.enqueue(1)  # type: ignore[call-arg]
    assert str(refused.value) == (
        "The arguments do not fit tests.queue.jobs.add(a, b): missing a required argument: 'b'."
    )
    assert not Job.objects.exists()


def test_a_misspelt_keyword_is_named() -> None:
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'bb'") as refused:
        jobs.add.enqueue(1, bb=2)  # type: ignore[call-arg]
    assert "(did you mean 'b'?)" in str(refused.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "call",
    [
        lambda: jobs.add.using(queue="reports").enqueue(),  # type: ignore[call-arg]
        lambda: enqueue(ADD, args=[1]),
        lambda: enqueue(jobs.add, args=[1, 2, 3]),
        lambda: enqueue(jobs.add.func, kwargs={"a": 1, "c": 2}),
        lambda: jobs.add.enqueue_many([{"a": 1}]),
        lambda: enqueue_many(ADD, [[1]]),
        lambda: enqueue_many(jobs.add.using(priority=3), [{"a": 1, "b": 2, "c": 3}]),
        lambda: jobs.decorated.enqueue(x=1, queue="emails"),  # type: ignore[call-arg]
    ],
)
def test_every_way_to_enqueue_checks_the_call(call: Any) -> None:
    with pytest.raises(TypeError, match="do not fit"):
        call()
    assert not Job.objects.exists()


def test_one_bad_item_refuses_the_batch_naming_it() -> None:
    with pytest.raises(TypeError, match=r"The arguments of item 2 do not fit .*'b'"):
        enqueue_many(jobs.add, [[1, 2], {"a": 1, "b": 2}, [1]])
    assert not Job.objects.exists()


def test_calls_that_fit_are_written() -> None:
    jobs.add.enqueue(1, b=2)
    enqueue(ADD, kwargs={"b": 2, "a": 1})
    enqueue_many(jobs.add, [[1, 2], {"a": 1, "b": 2}])
    jobs.echo.enqueue(1, 2, anything="goes")
    jobs.fail.enqueue()  # a default
    assert Job.objects.count() == 6


def test_the_answer_kept_for_a_shape_is_the_same_answer() -> None:
    """The answer is kept per shape of call: asked again, it is what it was."""
    for _ in range(3):
        with pytest.raises(TypeError, match="missing a required argument: 'b'"):
            enqueue(jobs.add, args=[1])
        enqueue(jobs.add, args=[1, 2])
    assert Job.objects.count() == 3


def test_the_signature_is_read_once_per_function() -> None:
    """Every enqueue of a function checks its call against the registered job's
    parameters, read at the first."""
    known = registered_job(ADD).parameters
    jobs.add.using(priority=2).enqueue(1, 2)
    enqueue(ADD, args=[1, 2])
    assert registered_job(jobs.add.func).parameters is known


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [([1], {}), ([1, 2, 3], {}), ([], {"a": 1, "bb": 2}), ([1], {"a": 2}), ([1, 2], {})],
)
def test_the_http_api_refuses_exactly_what_enqueue_refuses(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    try:
        enqueue(jobs.add, args=args, kwargs=kwargs)
    except TypeError as error:
        [(_field, [message])] = call_problem(registered_job(ADD), args, kwargs).items()
        assert message.removeprefix("The arguments do not fit the function: ") in str(error)
    else:
        assert call_problem(registered_job(ADD), args, kwargs) == {}


def test_a_hostile_keyword_is_quoted_short() -> None:
    with pytest.raises(TypeError) as refused:
        enqueue(jobs.add, args=[1, 2], kwargs={"x" * 10_000_000: 1})
    assert len(str(refused.value)) < 500
    assert not Job.objects.exists()


def test_the_admin_says_why_it_cannot_retry_a_call_that_no_longer_fits(
    admin_client: Client,
) -> None:
    """A job enqueued before its function gained a parameter cannot be retried as it was:
    the admin says why instead of failing the request."""
    handle = enqueue(jobs.add, args=[1, 2])
    Job.objects.filter(pk=handle.id).update(args=[1], status=Status.FAILED)

    page = run_action(admin_client, "retry_selected", handle.id)

    assert f"Could not retry {handle.id}: The arguments do not fit" in page
    assert "missing a required argument: &#x27;b&#x27;" in page
    assert list(Job.objects.values_list("id", flat=True)) == [handle.id]

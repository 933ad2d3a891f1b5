"""Enqueue options hold any text and any JSON, on every insert path.

A plain enqueue sends its fixed options as literals inside a prepared INSERT (PostgreSQL),
an enqueue with an id saves a model, ``enqueue_many`` COPYs its rows: what is read back
from the row must be exactly what was given, ``%`` and quotes included. Only what a
database cannot hold is refused, on every database alike: NUL, which PostgreSQL text
cannot hold, and lone surrogates (``os.fsdecode`` of a file name that is not UTF-8), which
no UTF-8 text can.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratequeue import Handle, JobFailed, Status, enqueue, enqueue_many
from django_ratequeue.db import _sessions
from django_ratequeue.engine.bounds import MAX_JSON_DEPTH
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Job
from tests.queue import jobs
from tests.queue.steps import leading_loop

pytestmark = pytest.mark.django_db

# What a driver or a SQL literal could read as something else.
TRICKY = ["%", "%s", "%%", "%(x)s", "%b", "$1", "'", "''", '"', "\\", "\\'", "?", ":x", "ü", "\n"]
pieces = st.lists(st.sampled_from(TRICKY) | st.text(max_size=4), max_size=8).map("".join)


def strings(size: int, *, min_size: int = 0) -> st.SearchStrategy[str]:
    """Any text of ``min_size`` to ``size`` characters but NUL, often with tricky pieces."""
    return (
        (pieces | st.text(max_size=size))
        .map(lambda value: value.replace("\x00", "")[:size])
        .filter(lambda value: len(value) >= min_size)
    )


# JSON as PostgreSQL's jsonb gives it back: floats whose shortest repr it keeps exactly
# (jsonb prints numbers without an exponent, so 1e300 would come back as an int).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(-1e15, 1e15, allow_nan=False)
    | strings(40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strings(20), inner, max_size=4),
    max_leaves=12,
)
options = st.fixed_dictionaries(
    {
        "queue": strings(200, min_size=1),
        "concurrency_key": strings(255),
        "owner": strings(255),
        "context": json_values,
    }
)
ids = strings(150, min_size=1)


def read_back(handle: Handle) -> dict[str, Any]:
    row = Job.objects.get(pk=handle.id)
    return {
        "queue": row.queue,
        "concurrency_key": row.concurrency_key,
        "owner": row.owner,
        "context": row.context,
    }


def stored_as_given(handle: Handle, values: dict[str, Any]) -> None:
    assert read_back(handle) == values
    assert Job.objects.get(pk=handle.id).args == [values["context"]]
    assert handle.status() == Status.WAITING  # the owner reads its own job back


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=options, job_id=ids)
def test_any_text_and_json_round_trips_on_every_insert_path(
    values: dict[str, Any], job_id: str
) -> None:
    Job.objects.all().delete()
    context = values["context"]
    # Twice: the first plain enqueue runs the INSERT's text, later ones EXECUTE it prepared.
    plain = [enqueue(jobs.echo, args=[context], **values) for _ in range(2)]
    chosen = enqueue(jobs.echo, args=[context], id=job_id, **values)
    many = enqueue_many(jobs.echo, [[context]] * 2, **values)
    named = enqueue_many(jobs.echo, [[context]], id=job_id + "/many", **values)
    assert chosen.id == job_id
    for handle in [*plain, chosen, *many, *named]:
        stored_as_given(handle, values)


@pytest.mark.parametrize(
    "value", ["50% off", "a%sb", "100%%", "%(x)s", "%", "'%s'", "%%s", "\\%s", "%s%s%s"]
)
def test_percent_signs_are_stored_as_given_by_the_prepared_insert(value: str) -> None:
    values = {"queue": value, "concurrency_key": value, "owner": value, "context": {value: value}}
    # A fresh session: its first INSERT runs as text, the second prepares it, the third
    # executes the prepared statement.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
        _sessions.pop(connection.connection, None)
    for _ in range(3):
        stored_as_given(enqueue(jobs.echo, args=[values["context"]], **values), values)


@pytest.mark.parametrize(
    ("options", "args", "what"),
    [
        ({"concurrency_key": "a\x00b"}, [], "concurrency_key"),
        ({"owner": "\x00"}, [], "owner"),
        ({"id": "job\x00"}, [], "id"),
        ({"queue": "q\x00"}, [], "queue"),
        ({"queue": {"name": "q\x00", "max_concurrency": 2}}, [], "queue"),
        ({"context": {"title": "a\x00b"}}, [], "context"),
        ({"context": {"\x00": 1}}, [], "context"),
        ({}, ["x\x00"], "arguments"),
    ],
)
def test_nul_is_refused_and_nothing_is_written(
    options: dict[str, Any], args: list[Any], what: str
) -> None:
    with pytest.raises(ValueError, match=rf"{what}.*NUL"):
        enqueue(jobs.echo, args=args, **options)
    with pytest.raises(ValueError, match=rf"{what}.*NUL"):
        enqueue_many(jobs.echo, [args], **options)
    assert not Job.objects.exists()


SURROGATE = os.fsdecode(b"caf\xe9")  # "caf\udce9"


@pytest.mark.parametrize(
    ("options", "args", "kwargs", "what"),
    [
        ({"concurrency_key": SURROGATE}, [], {}, "concurrency_key"),
        ({"owner": SURROGATE}, [], {}, "owner"),
        ({"id": SURROGATE}, [], {}, "id"),
        ({"queue": SURROGATE}, [], {}, "queue"),
        ({"queue": {"name": SURROGATE, "max_concurrency": 2}}, [], {}, "queue"),
        ({"context": {"title": SURROGATE}}, [], {}, "context"),
        ({"context": {SURROGATE: 1}}, [], {}, "context"),
        ({}, [SURROGATE], {}, "arguments"),
        ({}, [["\ud83d", "\ude00"]], {}, "arguments"),  # a pair, as two characters
        ({}, [], {"name": SURROGATE}, "keyword arguments"),
    ],
)
def test_a_lone_surrogate_is_refused_and_nothing_is_written(
    options: dict[str, Any], args: list[Any], kwargs: dict[str, Any], what: str
) -> None:
    with pytest.raises(ValueError, match=rf"{what} must be valid Unicode.*lone surrogate"):
        enqueue(jobs.echo, args=args, kwargs=kwargs, **options)
    with pytest.raises(ValueError, match=rf"{what}.*lone surrogate"):
        enqueue_many(jobs.echo, [kwargs or args], **options)
    assert not Job.objects.exists()


def test_characters_beyond_the_bmp_and_escapes_that_look_like_surrogates_are_stored() -> None:
    values = ["😀 🎉", "\\udce9", "\\ud83d\\ude00", {"😀": "\\udce9"}]
    handle = enqueue(jobs.echo, args=values, context={"😀": "\\ud800"}, owner="😀")
    row = Job.objects.get(pk=handle.id)
    assert (row.args, row.context, row.owner) == (values, {"😀": "\\ud800"}, "😀")


def test_json_nested_past_the_bound_is_refused_at_any_depth() -> None:
    assert enqueue(jobs.echo, args=[jobs.return_nested(MAX_JSON_DEPTH - 1)])  # with args' list
    for depth in (MAX_JSON_DEPTH, 100_000):
        with pytest.raises(ValueError, match=f"arguments must not nest .* {MAX_JSON_DEPTH} deep"):
            enqueue(jobs.echo, args=[jobs.return_nested(depth)])
        with pytest.raises(ValueError, match=f"context must not nest .* {MAX_JSON_DEPTH} deep"):
            enqueue(jobs.echo, context={"x": jobs.return_nested(depth)})
    assert Job.objects.count() == 1


def test_an_escaped_backslash_before_u0000_is_not_a_nul() -> None:
    handle = enqueue(jobs.echo, args=["\\u0000"], context={"\\u0000": "\\\\u0000"})
    row = Job.objects.get(pk=handle.id)
    assert (row.args, row.context) == (["\\u0000"], {"\\u0000": "\\\\u0000"})


@pytest.mark.parametrize(
    ("func", "error"),
    [
        (jobs.return_nul, "return value must not contain NUL"),
        (jobs.fail_with_nul, r"ValueError: bad \\x00 value"),
        (jobs.return_surrogate, "return value must be valid Unicode: it holds a lone surrogate"),
        (jobs.fail_with_surrogate, r"FileNotFoundError: no such file: caf\?\.txt"),
    ],
)
def test_an_unstorable_outcome_fails_that_job_alone(func: Any, error: str) -> None:
    """No database stores a NUL in text or a lone surrogate: a result holding one fails
    its job, an error quoting one is stored escaped or replaced, and the other outcomes
    reported with it are written."""
    bad = enqueue(func, retries=0)
    innocent = enqueue(jobs.add, args=[1, 2])
    loop = leading_loop()
    loop.step()  # dispatches both, in one batch
    Runner("a-worker").drain()
    loop.step()
    assert innocent.result(timeout=0) == 3
    with pytest.raises(JobFailed, match=error) as failed:
        bad.result(timeout=0)
    assert "\x00" not in failed.value.traceback

"""A report the database refuses fails only its own attempt: the runner's one statement for
its chunk is written row by row, and the row PostgreSQL still refuses is written as a
failure that says why, rather than leaving every attempt of the chunk running for good."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from django.db import connection

from django_ratequeue import JobFailed, enqueue, get_handle
from django_ratequeue.engine.execution import run_attempt
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Attempt
from tests.queue import jobs
from tests.queue.steps import leading_loop

# What os.fsdecode() gives for a file name that is not UTF-8: jsonb cannot hold it.
SURROGATE = os.fsdecode(b"caf\xe9")


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    "in_a_transaction",
    [
        pytest.param(False, marks=pytest.mark.django_db(transaction=True)),
        pytest.param(True, marks=pytest.mark.django_db),
    ],
)
def test_an_outcome_the_database_refuses_fails_that_attempt_alone(in_a_transaction: bool) -> None:
    """In autocommit, as a runner reports, and inside a transaction (a test's, or a
    caller's), which the refused statement must not abort."""
    assert connection.in_atomic_block == in_a_transaction
    handles = {enqueue(jobs.add, args=[n, n], retries=0).id: n for n in range(3)}
    loop = leading_loop()
    loop.step()
    runner = Runner(beat(force=True))
    chunk = runner.claim(8)
    assert {attempt.job_id for attempt in chunk} == set(handles)
    ended = [run_attempt(attempt) for attempt in chunk]
    bad = chunk[1]
    # Past the checks, as a report not made by Report's constructors would hold it.
    ended[1] = replace(ended[1], report=ended[1].report.unchecked(result=SURROGATE))

    runner.report(ended)
    loop.step()

    assert not Attempt.objects.filter(ended_at=None).exists()
    for job_id, n in handles.items():
        if job_id != bad.job_id:
            assert get_handle(job_id).result(timeout=0) == 2 * n
    with pytest.raises(JobFailed) as failed:
        get_handle(bad.job_id).result(timeout=0)
    assert failed.value.error.startswith(
        "The database refused this attempt's outcome, so it failed: invalid input syntax for "
        "type json; DETAIL:  Unicode low surrogate must follow a high surrogate."
    )
    assert failed.value.exception_class_path == "django.db.utils.DataError"
    assert SURROGATE not in failed.value.error

"""No input can stop the loop: every number a job asks for is bounded at enqueue, the sizes
of its row are capped, and a job whose row the loop cannot process (changed behind the
app's back) is failed on its own while the others go on."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from datetime import timezone as tz
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_ratequeue import Retry, Status, enqueue, enqueue_many, get_handle
from django_ratequeue.engine.bounds import LATEST, clip, later, nested_deeper
from django_ratequeue.models import Attempt, Job, WorkerHeartbeat
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import freeze, leading_loop, run_pass
from tests.queue.test_settings_and_retention import check_ids

INF, NAN = math.inf, math.nan
FAR = "9999-12-31T23:59:59.999999+00:00"


# -- enqueue: every number finite and bounded -------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start_at": FAR}, "start_at .* too far ahead"),
        ({"start_at": datetime(9999, 12, 31, tzinfo=UTC)}, "too far ahead"),
        ({"start_at": timezone.now() + timedelta(days=3660)}, "at most 3650 days ahead"),
        ({"start_at": datetime(1, 1, 1, tzinfo=tz(timedelta(hours=5)))}, "out of range"),
        ({"start_at": datetime.max}, "start_at"),
        ({"run_after": INF}, "run_after must be 0 or more and at most"),
        ({"run_after": NAN}, "run_after"),
        ({"run_after": 1e308}, "run_after"),
        ({"run_after": sys.maxsize}, "run_after"),
        ({"run_after": timedelta(days=4000)}, "run_after"),
        ({"timeout": 3e11}, "timeout must be more than 0 and at most 604800 seconds"),
        ({"timeout": INF}, "timeout"),
        ({"timeout": NAN}, "timeout"),
        ({"timeout": timedelta(days=8)}, "timeout"),
        ({"retries": {"initial_interval": sys.maxsize}}, "initial_interval"),
        ({"retries": {"max_interval": INF}}, "max_interval"),
        ({"retries": {"initial_interval": NAN}}, "initial_interval"),
        ({"retries": {"backoff_factor": INF}}, "backoff_factor must be a number from 1 to"),
        ({"retries": {"backoff_factor": NAN}}, "backoff_factor"),
        ({"retries": {"backoff_factor": 1e308}}, "backoff_factor"),
        ({"retries": {"retry_count": 10**9}}, "retry_count must be an integer from 0 to 1000"),
        ({"retries": 10**9}, "retries must be an integer from 0 to 1000"),
        ({"priority": 2**31}, "priority must be an integer from -2147483648 to 2147483647"),
        ({"priority": -(2**31) - 1}, "priority"),
        ({"priority": 1e308}, "priority"),
        ({"cost": 2**31}, "cost must be an integer from 0 to 2147483647"),
        ({"cost": -1}, "cost"),
        ({"cost": INF}, "cost"),
        ({"owner": "x" * 256}, "owner must be at most 255 characters"),
    ],
)
def test_hostile_numbers_are_refused_at_enqueue_and_write_nothing(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        enqueue(jobs.add, args=[1, 2], **options)
    with pytest.raises(ValueError, match=message):
        enqueue_many(jobs.add, [[1, 2]], **options)
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [NAN, -1, INF, -INF, "5", True])
def test_a_wait_for_a_result_is_bounded(timeout: Any) -> None:
    """``nan`` never expires (``now >= nan`` is false): a wait that could hang for good is
    refused with the fix, as a negative or non-numeric one is."""
    handle = enqueue(jobs.add, args=[1, 2])
    with pytest.raises(ValueError, match=r"timeout must be None .* or a finite number"):
        handle.result(timeout=timeout)


def test_a_retry_policy_is_bounded_when_built() -> None:
    with pytest.raises(ValueError, match="initial_interval"):
        Retry(initial_interval=sys.maxsize)
    with pytest.raises(ValueError, match="backoff_factor"):
        Retry(backoff_factor=INF)
    steepest = Retry(
        retry_count=1000, initial_interval=3650 * 86400, max_interval=3650 * 86400,
        backoff_factor=100,
    )  # fmt: skip
    assert steepest.delay(1000) <= 1.2 * 3650 * 86400


def test_times_computed_from_a_row_are_clamped_not_overflowed() -> None:
    now = timezone.now()
    assert later(now, INF) == LATEST
    assert later(now, 1e308) == LATEST
    assert later(now, NAN) == LATEST
    assert later(now, -INF) == now
    assert later(datetime(9999, 12, 31, 23, 59, tzinfo=UTC), 60).year == 9999
    assert later(now, 60) == now + timedelta(seconds=60)


@pytest.mark.django_db
def test_the_far_past_and_the_bounds_themselves_are_accepted() -> None:
    enqueue(jobs.add, args=[1, 2], start_at=datetime(1, 1, 1, tzinfo=UTC))
    enqueue(jobs.add, args=[1, 2], run_after=timedelta(days=3650), timeout=timedelta(days=7))
    enqueue(jobs.add, args=[1, 2], priority=2**31 - 1, cost=2**31 - 1, owner="o" * 255)
    enqueue(jobs.add, args=[1, 2], retries={"retry_count": 1000, "backoff_factor": 100})
    assert Job.objects.count() == 4


# -- sizes ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_arguments_and_context_over_the_cap_are_refused(settings: Any) -> None:
    ten_mb = "x" * (10 * 1024 * 1024)
    with pytest.raises(ValueError, match=r'arguments and context are \d+ bytes .*"MAX_ARG'):
        enqueue(jobs.echo, args=[ten_mb])
    with pytest.raises(ValueError, match="MAX_ARGUMENTS_BYTES"):
        enqueue(jobs.add, args=[1, 2], context={"blob": ten_mb})
    with pytest.raises(ValueError, match=r"arguments \(item 1\) and context"):
        enqueue_many(jobs.echo, [["small"], [ten_mb]])
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_ARGUMENTS_BYTES": 100}
    with pytest.raises(ValueError, match=r"\(100\)"):
        enqueue(jobs.echo, args=["y" * 50], context={"z": "z" * 50})
    assert not Job.objects.exists()
    enqueue(jobs.echo, args=["y" * 40])
    assert Job.objects.count() == 1


@pytest.mark.django_db  # Django 6's checks read the database
def test_the_caps_are_checked_at_start_up() -> None:
    for name in ("MAX_ARGUMENTS_BYTES", "MAX_RESULT_BYTES", "MAX_ERROR_BYTES"):
        assert check_ids(**{name: 0}) == ["django_ratequeue.E201"], name
        assert check_ids(**{name: "big"}) == ["django_ratequeue.E201"], name
        assert check_ids(**{name: 4096}) == [], name


def test_clip_keeps_both_ends_within_the_cap() -> None:
    text = "first line\n" + "é" * 100_000 + "\nValueError: the end"
    clipped = clip(text, 1000)
    assert len(clipped.encode()) <= 1000
    assert clipped.startswith("first line") and clipped.endswith("ValueError: the end")
    assert "bytes cut" in clipped
    assert clip("short", 1000) == "short"
    assert clip("\ud800 lone surrogate", 1000) == "? lone surrogate"
    assert clip("a NUL: \x00", 1000) == "a NUL: \\x00"


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {}]}', 3),
        ('[{}, [], {"a": [[]]}]', 4),
        ('["]]]", "[[[[", "\\\\", "\\"]"]', 1),  # brackets and quotes inside strings
        ("[" * 200 + "]" * 200, 200),
    ],
)
def test_nesting_is_measured_on_the_text(text: str, depth: int) -> None:
    assert not nested_deeper(text, depth)
    assert depth == 0 or nested_deeper(text, depth - 1)


def test_nesting_past_a_bound_is_found_whatever_the_depth() -> None:
    assert nested_deeper("[" * 100_000 + "]" * 100_000, 128)


def drive(done: Callable[[], bool], limit: float = 30) -> None:
    """Run passes of the loop here, with their batches, until ``done()``."""
    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, "the loop did not get there"
        run_pass()


@pytest.mark.django_db
def test_a_result_over_the_cap_fails_and_errors_are_cut(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "MAX_RESULT_BYTES": 1000, "MAX_ERROR_BYTES": 500}
    big = enqueue(jobs.echo, args=["r" * 2000], retries=0)
    loud = enqueue(jobs.fail, args=["e" * 100_000], retries=0)
    fine = enqueue(jobs.echo, args=["r" * 100], retries=0)
    drive(lambda: all(h.status() in (Status.FAILED, Status.COMPLETE) for h in (big, loud, fine)))
    assert fine.status() == Status.COMPLETE
    failed = Job.objects.get(pk=big.id)
    assert failed.status == Status.FAILED and failed.result is None
    assert "The job's result is 2028 bytes of JSON; the most is" in failed.error
    assert 'RATEQUEUE["MAX_RESULT_BYTES"] (1000)' in failed.error
    cut = Job.objects.get(pk=loud.id)
    assert len(cut.error.encode()) <= 500 and len(cut.traceback.encode()) <= 500
    assert cut.error.startswith("ValueError: eee") and "bytes cut" in cut.error
    assert cut.traceback.startswith("Traceback") and cut.traceback.rstrip().endswith("eeee")


# -- rows changed behind the app's back: the others go on ---------------------------------


def innocent_completes(log: Path) -> None:
    """A job enqueued after the damage still runs, with passes of the loop run here.

    (Rows cannot hold JSON that does not parse: PostgreSQL's jsonb and the CHECK
    constraint Django puts on SQLite's JSON columns refuse it; the tests write JSON of
    the wrong shape instead.)"""
    handle = enqueue(jobs.record, args=[str(log), "innocent"], retries=0)
    drive(lambda: handle.status() == Status.COMPLETE)
    assert "innocent" in log.read_text()


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.RETRYING])
def test_a_start_in_the_year_9999_written_behind_our_back(tmp_path: Path, status: str) -> None:
    poison = enqueue(jobs.add, args=[1, 2], run_after=3600)
    Job.objects.filter(pk=poison.id).update(status=status, start_at=datetime.fromisoformat(FAR))
    innocent_completes(tmp_path / "runs.log")
    assert poison.status() == status


@pytest.mark.django_db
@pytest.mark.parametrize(
    "retry",
    [
        "garbage",
        {"initial_interval": 1e308},
        {"backoff_factor": 1e308, "initial_interval": 1},
        {"retry_count": "x"},
        {"unknown": 1},
    ],
)
def test_a_retry_policy_broken_behind_our_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, retry: Any
) -> None:
    poison = enqueue(jobs.fail, id="evil\nid", retries=3)
    Job.objects.filter(pk=poison.id).update(retry=retry)
    with caplog.at_level(logging.ERROR, logger="django_ratequeue.queue"):
        innocent_completes(tmp_path / "runs.log")
        drive(lambda: poison.status() == Status.FAILED)
    error = Job.objects.get(pk=poison.id).error
    assert error.startswith("The main loop could not process this job: ")
    assert not Attempt.objects.filter(job_id=poison.id, active=True).exists()
    assert "job 'evil\\nid' could not be processed" in caplog.text


@pytest.mark.django_db
def test_arguments_of_the_wrong_shape_do_not_run_the_function(tmp_path: Path) -> None:
    handle = enqueue(jobs.echo, args=[1], retries=3)
    Job.objects.filter(pk=handle.id).update(args="abc", kwargs=[1])
    innocent_completes(tmp_path / "runs.log")
    drive(lambda: handle.status() == Status.FAILED)
    job = Job.objects.get(pk=handle.id)
    assert "malformed arguments" in job.error and job.attempts == 1


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [3e11, INF, NAN])
def test_a_timeout_written_behind_our_back_does_not_stop_recovery(
    tmp_path: Path, timeout: float
) -> None:
    handle = enqueue(jobs.add, args=[1, 2], timeout=30)
    leading_loop().step()  # dispatches it; its batch is never run
    WorkerHeartbeat.objects.create(id="w", pid=1, host="h", seen_at=timezone.now())
    Attempt.objects.filter(job_id=handle.id).update(
        worker="w", started_at=timezone.now() - timedelta(seconds=60), timeout=timeout
    )
    innocent_completes(tmp_path / "runs.log")  # each pass looks for overruns first
    assert handle.status() == Status.RUNNING  # within its (huge) timeout


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [3e11, NAN])
def test_a_timeout_written_behind_our_back_does_not_break_the_run(
    tmp_path: Path, timeout: float
) -> None:
    handle = enqueue(jobs.add, args=[1, 2], timeout=30, retries=0)
    Job.objects.filter(pk=handle.id).update(timeout=timeout)
    innocent_completes(tmp_path / "runs.log")
    drive(lambda: handle.status() == Status.COMPLETE)
    assert handle.result() == 3


@pytest.mark.django_db
def test_a_function_removed_while_its_job_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """No worker knows it: no try, it waits, and fails after UNKNOWN_JOB_PATIENCE."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "UNKNOWN_JOB_PATIENCE": 60}
    clock = freeze(monkeypatch)
    handle = enqueue(jobs.add, args=[1, 2], retries=0)
    Job.objects.filter(pk=handle.id).update(func="tests.queue.jobs.removed_since")
    innocent_completes(tmp_path / "runs.log")
    assert handle.status() == Status.RUNNING
    clock.advance(61)
    drive(lambda: handle.status() == Status.FAILED)
    assert "tests.queue.jobs.removed_since" in Job.objects.get(pk=handle.id).error


@pytest.mark.django_db
def test_a_queue_removed_from_settings_while_its_jobs_wait(tmp_path: Path, settings: Any) -> None:
    base = dict(settings.RATEQUEUE)
    settings.RATEQUEUE = {**base, "QUEUES": {"gone": {"max_concurrency": 2}}}
    handle = enqueue(jobs.add, args=[1, 2], queue="gone")
    settings.RATEQUEUE = base
    innocent_completes(tmp_path / "runs.log")
    drive(lambda: handle.status() == Status.COMPLETE)


@pytest.mark.django_db
def test_a_rate_limit_removed_from_settings_while_its_jobs_wait(settings: Any) -> None:
    """Settings whose queue names a removed limit are refused by the loop, as by the system
    checks, rather than run with: the job waits, and runs once the settings are fixed."""
    base = dict(settings.RATEQUEUE)
    limit = {"kind": "token bucket", "rate": 10, "period": 1}
    settings.RATEQUEUE = {
        **base,
        "QUEUES": {"gated": {"max_concurrency": 2, "rate_limit": "gone"}},
        "RATE_LIMITS": {"gone": limit},
    }
    handle = enqueue(jobs.add, args=[1, 2], queue="gated")
    settings.RATEQUEUE = {**base, "QUEUES": {"gated": {"rate_limit": "gone"}}}
    with pytest.raises(ImproperlyConfigured, match=r"E215: .*\['gated'\]\['rate_limit'\]"):
        run_pass()
    assert handle.status() == Status.WAITING
    settings.RATEQUEUE = {**base, "QUEUES": {"gated": {"max_concurrency": 2}}}
    drive(lambda: handle.status() == Status.COMPLETE)


@pytest.mark.django_db
def test_a_cost_raised_behind_our_back_beyond_its_rate_limit(
    tmp_path: Path, settings: Any
) -> None:
    settings.RATEQUEUE = {
        **settings.RATEQUEUE,
        "QUEUES": {"gated": {"max_concurrency": 2, "rate_limit": "tokens"}},
        "RATE_LIMITS": {
            "tokens": {"kind": "token bucket", "rate": 10, "period": 1, "max_reserved": 5}
        },
    }
    handle = enqueue(jobs.add, args=[1, 2], queue="gated")
    Job.objects.filter(pk=handle.id).update(cost=2**31 - 1)
    innocent_completes(tmp_path / "runs.log")
    drive(lambda: handle.status() == Status.FAILED)
    assert "can never fit" in Job.objects.get(pk=handle.id).error


# -- end to end, with a real cluster --------------------------------------------------------


def test_poison_rows_do_not_stop_a_real_cluster(cluster: Any, tmp_path: Path) -> None:
    cluster(workers=2, UNKNOWN_JOB_PATIENCE=1.0)  # the function "gone" names: no worker knows it
    far = enqueue(jobs.add, args=[1, 2], run_after=3600)
    broken = enqueue(jobs.fail, retries=3)
    gone = enqueue(jobs.add, args=[1, 2], retries=0)
    Job.objects.filter(pk=far.id).update(start_at=datetime.fromisoformat(FAR))
    Job.objects.filter(pk=broken.id).update(retry={"initial_interval": 1e308})
    Job.objects.filter(pk=gone.id).update(func="tests.queue.jobs.removed_since")
    log = tmp_path / "runs.log"
    innocent = enqueue(jobs.record, args=[str(log), "innocent"], retries=0)
    wait_for(lambda: innocent.status() == Status.COMPLETE, message="the innocent job")
    wait_for(lambda: broken.status() == gone.status() == Status.FAILED, message="the poison")
    assert get_handle(far.id).status() == Status.SCHEDULED
    later_job = enqueue(jobs.add, args=[2, 3])
    assert later_job.result(timeout=30) == 5

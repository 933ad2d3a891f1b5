"""The wall on a remote worker: the hostile catalogue (tests/hostile.py) run by a real
worker process against a real server, each attempt ending with a clear error or a plain
result, and the worker going on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_ratequeue import Handle
from tests.cluster import wait_for
from tests.hostile import EXPECTED, KINDS
from tests.queue import hostile_jobs
from tests.queue.test_wall import all_ended, ended_as_expected
from tests.remote.test_workers import Remote, start_remote  # noqa: F401  (a fixture)

# A result over the server's request size is refused before MAX_RESULT_BYTES is read.
REMOTE_EXPECTED = {**EXPECTED, "ten megabytes": ("failed", "API_MAX_BODY_BYTES")}


def test_a_remote_worker_runs_the_catalogue_and_goes_on(
    start_remote: Callable[..., Remote],  # noqa: F811
) -> None:
    # A lease long enough for a 10 MB report on a loaded machine: leases are not the point.
    remote = start_remote(REMOTE_LEASE=10.0)
    remote.worker(concurrency=8)
    handles: dict[tuple[str, bool], Handle[Any]] = {
        (kind, is_async): (hostile_jobs.hostile_async if is_async else hostile_jobs.hostile)
        .using(queue="gpu")
        .enqueue(kind)
        for kind in KINDS
        for is_async in (False, True)
    }
    wait_for(all_ended(list(handles.values())), 180, "every hostile job's end")
    for (kind, _is_async), handle in handles.items():
        ended_as_expected(kind, handle, REMOTE_EXPECTED)
    after = [hostile_jobs.innocent.using(queue="gpu").enqueue(f"after {n}") for n in range(4)]
    assert [h.result(timeout=60) for h in after] == [f"after {n}" for n in range(4)]

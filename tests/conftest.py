"""The root fixtures: the database vendor, and real qcluster processes (``cluster``)."""

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.cluster import FAST_TIMINGS, Cluster, launch, wait_for


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def local_clock(settings: Any) -> None:
    """Run the test on this process's clock (``RATEQUEUE["CLOCK"] = "local"``)."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "CLOCK": "local"}


@pytest.fixture
def cluster(
    transactional_db: None, settings: Any, tmp_path: Path
) -> Iterator[Callable[..., Cluster]]:
    """``cluster(workers=2, wait=True, **RATEQUEUE overrides)`` starts ``manage.py qcluster``
    on the test database and, with ``wait``, returns once every worker has reported; the test
    process uses the same overrides. Call it twice for two clusters (two hosts). Every
    cluster's process group is killed at teardown."""
    started: list[Cluster] = []
    base = dict(settings.RATEQUEUE)

    def start(workers: int = 2, wait: bool = True, **overrides: Any) -> Cluster:
        options = {**FAST_TIMINGS, **overrides}
        settings.RATEQUEUE = {**base, **options}
        running = launch(options, workers, tmp_path / f"qcluster-{len(started)}.log")
        started.append(running)
        if wait:
            running.wait_for_workers(workers)
        return running

    yield start
    for running in started:
        running.kill()


@pytest.fixture(scope="module")
def background_threads_stop() -> Iterator[None]:
    """After the module's tests, wait until the package's background threads (the
    progress writer, the event streams' watcher), which stop within a second of having
    nothing to do, have closed their connections: PostgreSQL drops no test database
    that a session still uses."""
    yield
    wait_for_background_threads()


def wait_for_background_threads() -> None:
    """Wait until the package's background threads have stopped (within a second or two)."""
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("ratequeue-")],
        10,
        "the package's background threads to stop",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that starts a real cluster ``cluster``; skip
    ``@pytest.mark.postgres_only`` tests when the suite runs on SQLite."""
    from django.conf import settings

    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (row locks across processes)")
    for item in items:
        if "postgres_only" in item.keywords:
            item.add_marker(skip)


def pytest_report_header() -> str:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"ratequeue database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"

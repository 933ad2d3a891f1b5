"""Fixtures of the dashboard's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboard.plans import JOBS, empty_tables, fill_jobs


@pytest.fixture(scope="module")
def million_jobs(django_db_setup: None, django_db_blocker: Any) -> Iterator[int]:
    """The jobs table filled with JOBS rows (see :func:`.plans.fill_jobs`), committed
    once for the module that uses it and emptied after it; PostgreSQL only (mark the
    module ``postgres_only``). Gives the number of jobs."""
    with django_db_blocker.unblock():
        fill_jobs(JOBS)
        try:
            yield JOBS
        finally:
            empty_tables()

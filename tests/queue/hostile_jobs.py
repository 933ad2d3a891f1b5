"""The hostile catalogue (tests/hostile.py) as registered jobs, plain and ``async def``."""

from __future__ import annotations

from typing import Any

from django_ratequeue import job, report_progress, stream_output
from tests.hostile import api_of, run

API = api_of(report_progress, stream_output)


@job(retries=0)
def hostile(kind: str) -> Any:
    return run(kind, API)


@job(retries=0)
async def hostile_async(kind: str) -> Any:
    return run(kind, API)


@job(retries=0)
def innocent(label: str) -> str:
    return label

"""Waiting jobs spread over concurrency keys, written at once for the loop's tests."""

from __future__ import annotations

from django.utils import timezone

from django_ratequeue import Retry, Status
from django_ratequeue.models import Job


def waiting(queue: str, keys: list[str], per_key: int) -> None:
    """Write ``per_key`` waiting jobs of ``queue`` for each of ``keys``, ready now."""
    now = timezone.now()
    retry = Retry().to_json()
    Job.objects.bulk_create(
        Job(id=f"job-{key or 'none'}-{n}", func="tests.queue.jobs.add", args=[1, 1],
            queue=queue, concurrency_key=key, status=Status.WAITING, start_at=now,
            created_at=now, retry=retry)
        for key in keys
        for n in range(per_key)
    )  # fmt: skip

"""Priority holds when workers are busy: a free worker never starts a lower-priority job
while a higher-priority one waits unclaimed. In process: one loop step dispatches five
jobs; a busy worker has claimed one of them and runs it; the free worker's runner runs
the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ratequeue import Retry, Status
from django_ratequeue.engine.models import WorkerHeartbeat
from django_ratequeue.engine.runner import Runner
from django_ratequeue.models import Attempt, Job
from tests.queue.steps import leading_loop


@pytest.mark.django_db
def test_a_free_worker_starts_the_highest_priority_waiting_anywhere() -> None:
    now = timezone.now()
    for worker in ("busy", "free"):
        WorkerHeartbeat.objects.create(id=worker, pid=1, host="h", seen_at=now)
    priorities = [20, 20, 10, 2, -2]
    Job.objects.bulk_create(
        Job(id=f"job-{n}", func="tests.queue.jobs.add", args=[1, 1], priority=priority,
            status=Status.WAITING, start_at=now, created_at=now + timedelta(microseconds=n),
            retry=Retry().to_json())
        for n, priority in enumerate(priorities)
    )  # fmt: skip
    leading_loop().step()
    assert Runner("busy").claim()  # the highest priority: it runs long

    Runner("free").drain()

    ran = list(
        Attempt.objects.filter(worker="free")
        .order_by("started_at", "pk")
        .values_list("job__priority", flat=True)
    )
    assert ran == sorted(priorities, reverse=True)[1:]

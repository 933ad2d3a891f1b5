"""More queues with waiting work than the loop looks at in one step: none starves."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone

from django_ratequeue import Retry, Status
from django_ratequeue.engine.dispatch import QUEUES_PER_STEP
from django_ratequeue.engine.models import Outcome
from django_ratequeue.models import Attempt, Job
from tests.queue.steps import leading_loop


def end_every_running_attempt() -> None:
    """What runners report: every dispatched attempt ran and succeeded."""
    now = timezone.now()
    Attempt.objects.filter(active=True, ended_at=None).update(
        worker="w", started_at=now, ended_at=now, outcome=Outcome.SUCCEEDED
    )


@pytest.mark.django_db
@override_settings(RATEQUEUE={"MAX_CONCURRENCY": 150})
def test_every_queue_is_served_when_more_than_a_step_looks_at_have_work() -> None:
    """1,050 queues with two waiting jobs each, 150 starts per step: in seven steps every
    queue gets its first start before any gets a second (in turns, like concurrency keys),
    and the queues past the first QUEUES_PER_STEP are not left to wait for the others."""
    queues = [f"q{n:04}" for n in range(QUEUES_PER_STEP + 50)]
    now = timezone.now()
    retry = Retry().to_json()
    Job.objects.bulk_create(
        Job(id=f"job-{name}-{n}", func="tests.queue.jobs.add", args=[1, 1], queue=name,
            status=Status.WAITING, start_at=now, created_at=now, retry=retry)
        for name in queues
        for n in range(2)
    )  # fmt: skip
    loop = leading_loop()

    served: list[str] = []
    for _ in range(len(queues) // 150):
        loop.step()
        started = Attempt.objects.filter(active=True, ended_at=None)
        served.extend(started.values_list("queue", flat=True))
        end_every_running_attempt()

    assert sorted(served) == queues


@pytest.mark.django_db
@override_settings(RATEQUEUE={"MAX_CONCURRENCY": 600, "MAX_QUEUE_CONCURRENCY": 600})
def test_one_step_starts_one_job_of_each_of_600_keys() -> None:
    """A step reads the next job of 600 keys at once: more parts than one SQLite
    statement may union (500), so it reads them in several."""
    now = timezone.now()
    retry = Retry().to_json()
    Job.objects.bulk_create(
        Job(id=f"job-{n}", func="tests.queue.jobs.add", args=[1, 1], queue="wide",
            concurrency_key=f"k{n:03}", max_concurrency=1, status=Status.WAITING,
            start_at=now, created_at=now, retry=retry)
        for n in range(600)
    )  # fmt: skip

    leading_loop().step()

    started = Attempt.objects.filter(active=True, ended_at=None)
    assert sorted(started.values_list("concurrency_key", flat=True)) == [
        f"k{n:03}" for n in range(600)
    ]

"""unique_for and debounce against a reference model, over random runs of enqueues,
promotions and time (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratequeue import Status, enqueue
from django_ratequeue.engine.transitions import promote_due
from django_ratequeue.models import Job, UniqueClaim
from tests.queue import jobs
from tests.queue.steps import freeze

WINDOW = 30
DEBOUNCE = 10


@dataclass
class ModelJob:
    args: list[Any]
    start: float
    status: Status


@dataclass
class Model:
    """What the options promise, in plain Python: times in seconds from the start."""

    now: float = 0.0
    jobs: list[ModelJob] = field(default_factory=list)
    windows: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> (job, end)
    bursts: dict[str, int] = field(default_factory=dict)  # key -> job

    def new_job(self, args: list[Any], start: float, status: Status) -> int:
        self.jobs.append(ModelJob(args, start, status))
        return len(self.jobs) - 1

    def unique_for(self, key: str, arg: int) -> int:
        held = self.windows.get(key)
        if held is not None and self.now < held[1]:
            return held[0]
        job = self.new_job([arg], self.now, Status.WAITING)
        self.windows[key] = (job, self.now + WINDOW)
        return job

    def debounce(self, key: str, arg: int) -> int:
        held = self.bursts.get(key)
        if held is not None and self.jobs[held].status == Status.SCHEDULED:
            self.jobs[held].args, self.jobs[held].start = [arg], self.now + DEBOUNCE
            return held
        job = self.new_job([arg], self.now + DEBOUNCE, Status.SCHEDULED)
        self.bursts[key] = job
        return job

    def promote(self) -> None:
        for job in self.jobs:
            if job.status == Status.SCHEDULED and job.start <= self.now:
                job.status = Status.WAITING


operations = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.sampled_from([1, 5, 10, 20, 30])),
        st.tuples(
            st.sampled_from(["unique_for", "debounce"]), st.sampled_from("ab"), st.integers(0, 3)
        ),
        st.tuples(st.just("promote")),
    ),
    max_size=25,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=operations)
@pytest.mark.django_db
def test_enqueues_do_what_the_model_says(steps: list[tuple[Any, ...]]) -> None:
    Job.objects.all().delete()
    UniqueClaim.objects.all().delete()
    model = Model()
    ids: dict[int, str] = {}  # model job -> real id
    with pytest.MonkeyPatch.context() as monkeypatch:
        clock = freeze(monkeypatch)
        start = clock.now()
        for step in steps:
            if step[0] == "advance":
                clock.advance(step[1])
                model.now += step[1]
            elif step[0] == "promote":
                promote_due(clock.now())
                model.promote()
            else:
                mode, key, arg = step
                option = {mode: WINDOW if mode == "unique_for" else DEBOUNCE}
                handle = enqueue(jobs.echo, args=[arg], unique_key=key, **option)
                expected = getattr(model, mode)(key, arg)
                assert ids.setdefault(expected, handle.id) == handle.id
        rows = {row.id: row for row in Job.objects.all()}
        assert set(rows) == set(ids.values())
        for index, expected_job in enumerate(model.jobs):
            row = rows[ids[index]]
            assert row.args == expected_job.args
            assert row.status == expected_job.status
            assert row.start_at == start + timedelta(seconds=expected_job.start)

"""How well ``Handle.eta()`` promises a start: estimates made at enqueue against the real starts.

    DATABASE_URL=postgres://root@127.0.0.1:5432/ratequeue_bench_eta \\
        .venv/bin/python -m bench.eta            # about a minute
    .venv/bin/python -m bench.eta --quick        # smoke run

Two scenarios, each on empty tables with a real ``qcluster`` (two workers):

- **steady**: a producer offers ``pause(200 ms)`` jobs to a queue of 4 slots at 1.5 times
  what it can run, so a backlog builds and the waits grow to several seconds. Before it,
  a warm-up of 40 jobs gives the rollups the queue's run time.
- **rate-gated**: a queue gated by a token bucket of 5 tokens a second (capacity 1), jobs
  offered at 8 a second: each waits for its tokens.

Right after each enqueue the producer asks the job's ``eta()``. Once every job has
started, each estimate is compared with the job's start (its attempt's ``started_at``, as
a runner began it): the figure is the median absolute error as a fraction of the wait
(enqueue → start); target at most 20%. In the rate-gated queue the producer also asks
again once the loop reserved the job's tokens (basis ``reservation``), and that estimate
is compared with the attempt's dispatch, the moment the loop started it: it should be
exact within one loop step (``SEGMENT``, 0.1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.common import machine_lines, prepare_database
from bench.harness import Workers, empty_tables, terminate

RUN_MS = 200
SLOTS = 4
TOKENS_PER_SECOND = 5
SETTINGS: dict[str, Any] = {
    "MAX_CONCURRENCY": 100,
    "QUEUES": {
        "eta_steady": {"max_concurrency": SLOTS},
        "eta_gated": {"max_concurrency": 100, "rate_limit": "eta_tokens"},
    },
    "RATE_LIMITS": {
        "eta_tokens": {
            "kind": "token bucket",
            "rate": TOKENS_PER_SECOND,
            "period": 1,
            "capacity": 1,
        }
    },
}


@dataclass(frozen=True)
class Promise:
    """What ``eta()`` said of one job when asked."""

    job_id: str
    asked_at: datetime
    estimate: datetime | None
    basis: str


@dataclass(frozen=True)
class Accuracy:
    """How far estimates were from the starts, as fractions of the waits."""

    jobs: int
    median_wait: float
    median_error: float  # fraction of the wait
    p90_error: float
    bias: float  # the median signed error, fraction of the wait (< 0: estimates too early)
    without_estimate: int
    bases: dict[str, int]

    def __str__(self) -> str:
        bases = ", ".join(f"{name} {count}" for name, count in sorted(self.bases.items()))
        return (
            f"{self.jobs} jobs, median wait {self.median_wait:.2f} s: median error "
            f"{self.median_error:.1%} of the wait (p90 {self.p90_error:.1%}, median signed "
            f"{self.bias:+.1%}); "
            f"{self.without_estimate} without an estimate; bases at enqueue: {bases}"
        )


def reset() -> None:
    from django_ratequeue.models import QueueMinute, QueueSetting, QueueTotal, RateLimitState

    empty_tables()
    for model in (QueueSetting, RateLimitState, QueueMinute, QueueTotal):
        model.objects.all().delete()


def analyze() -> None:
    """ANALYZE the queue's tables: the shared server runs no autovacuum."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout} s")
        time.sleep(0.1)


def produce(queue: str, rate: float, seconds: float, args: list[Any]) -> list[Promise]:
    """Enqueue at ``rate`` for ``seconds`` on a fixed timetable, asking each job's eta."""
    from bench.jobs import pause
    from django_ratequeue import clock, enqueue

    promises = []
    began = time.monotonic()
    for call in range(int(rate * seconds)):
        if (wait := began + call / rate - time.monotonic()) > 0:
            time.sleep(wait)
        handle = enqueue(pause, args=args, queue=queue)
        asked_at = clock.now()
        eta = handle.eta()
        promises.append(Promise(handle.id, asked_at, eta.estimated_start, eta.basis))
    return promises


def starts(ids: list[str], column: str) -> dict[str, datetime]:
    """The first attempt's ``column`` (started_at or dispatched_at) of each job."""
    from django_ratequeue.models import Attempt

    rows = Attempt.objects.filter(job_id__in=ids, number=1).values_list("job_id", column)
    return {job_id: moment for job_id, moment in rows if moment is not None}


def accuracy(promises: list[Promise], started: dict[str, datetime]) -> Accuracy:
    errors, signed, waits, missing = [], [], [], 0
    bases: dict[str, int] = {}
    for promise in promises:
        bases[promise.basis] = bases.get(promise.basis, 0) + 1
        start = started[promise.job_id]
        wait = (start - promise.asked_at).total_seconds()
        waits.append(wait)
        if promise.estimate is None:
            missing += 1
            continue
        error = (promise.estimate - start).total_seconds() / max(wait, 0.1)
        errors.append(abs(error))  # a wait under a loop step counts as one
        signed.append(error)
    errors.sort()
    p90 = errors[int(len(errors) * 0.9)] if errors else float("nan")
    median = statistics.median(errors) if errors else float("nan")
    bias = statistics.median(signed) if signed else float("nan")
    return Accuracy(len(promises), statistics.median(waits), median, p90, bias, missing, bases)


def all_started(ids: list[str]) -> Callable[[], bool]:
    from django_ratequeue.models import Attempt

    return lambda: Attempt.objects.filter(job_id__in=ids, number=1).count() >= len(ids)


def steady(seconds: float) -> Accuracy:
    """The steady scenario: a warm-up, then 1.5 times the queue's capacity offered."""
    from bench.jobs import pause
    from django_ratequeue import enqueue_many

    warmup = [h.id for h in enqueue_many(pause, [[RUN_MS]] * 40, queue="eta_steady")]
    wait_until(all_started(warmup), 60, "the warm-up")
    wait_until(done(warmup), 60, "the warm-up's end")
    analyze()
    capacity = SLOTS * 1000 / RUN_MS
    promises = produce("eta_steady", capacity * 1.5, seconds, [RUN_MS])
    ids = [p.job_id for p in promises]
    wait_until(all_started(ids), 60 + len(ids) / capacity, "every job to start")
    return accuracy(promises, starts(ids, "started_at"))


def done(ids: list[str]) -> Callable[[], bool]:
    from django_ratequeue import Status
    from django_ratequeue.models import Job

    return lambda: Job.objects.filter(pk__in=ids, status=Status.COMPLETE).count() >= len(ids)


@dataclass(frozen=True)
class Reservations:
    """How close the reservations' estimates came to the loop's dispatch."""

    jobs: int
    median_ms: float
    worst_ms: float

    def __str__(self) -> str:
        return (
            f"{self.jobs} reservations: estimate vs the loop's dispatch, median "
            f"{self.median_ms:.0f} ms, worst {self.worst_ms:.0f} ms"
        )


def gated(seconds: float) -> tuple[Accuracy, Reservations]:
    """The rate-gated scenario: jobs offered faster than their tokens come."""
    from bench.jobs import pause
    from django_ratequeue import clock, enqueue, get_handle

    first = enqueue(pause, args=[1], queue="eta_gated")  # the cluster is up once it started
    wait_until(all_started([first.id]), 60, "the cluster to start")
    analyze()
    promises = produce("eta_gated", TOKENS_PER_SECOND * 1.6, seconds, [1])
    ids = [p.job_id for p in promises]
    reserved: list[Promise] = []
    dispatched = starts(ids, "dispatched_at")
    for job_id in ids:  # those not started yet have their reservation now
        if job_id in dispatched:
            continue
        eta = get_handle(job_id).eta()
        if eta.basis == "reservation":
            reserved.append(Promise(job_id, clock.now(), eta.estimated_start, eta.basis))
    wait_until(all_started(ids), 60 + len(ids) / TOKENS_PER_SECOND, "every job to start")
    dispatched = starts(ids, "dispatched_at")
    gaps = sorted(
        abs((dispatched[p.job_id] - p.estimate).total_seconds()) * 1000
        for p in reserved
        if p.estimate is not None
    )
    exact = Reservations(len(gaps), statistics.median(gaps) if gaps else 0, max(gaps, default=0))
    return accuracy(promises, starts(ids, "started_at")), exact


def run_with_workers(scenario: Callable[[], Any]) -> Any:
    reset()
    workers = Workers([["qcluster"]], {"BENCH_RATEQUEUE": json.dumps(SETTINGS)})
    try:
        return scenario()
    finally:
        workers.kill()


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.eta",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=20, help="seconds of offered load")
    parser.add_argument("--quick", action="store_true", help="smoke run (5 s each)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 5
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_RATEQUEUE"] = json.dumps(SETTINGS)
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    database = prepare_database()
    command = " ".join(["python -m bench.eta", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*machine_lines(database), f"command: {command}"]), flush=True)
    try:
        capacity = SLOTS * 1000 // RUN_MS
        print(
            f"- steady ({RUN_MS} ms jobs, {SLOTS} slots: {capacity}/s, offered "
            f"{capacity * 1.5:g}/s for {args.seconds:g} s): "
            f"{run_with_workers(lambda: steady(args.seconds))}",
            flush=True,
        )
        at_enqueue, reservations = run_with_workers(lambda: gated(args.seconds))
        print(
            f"- rate-gated ({TOKENS_PER_SECOND} tokens/s, offered "
            f"{TOKENS_PER_SECOND * 1.6:g}/s for {args.seconds:g} s): {at_enqueue}; "
            f"{reservations}",
            flush=True,
        )
    finally:
        reset()


if __name__ == "__main__":
    main()

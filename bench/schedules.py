"""The loop's cost of recurring schedules: 10,000 schedules, 1,000 due in the same minute
(issue 22's target: at most 1.2x an empty step per enqueued run).

    .venv/bin/python -m bench.schedules               # about a minute
    .venv/bin/python -m bench.schedules --repeats 5

In this process, on the benchmark database (``ratequeue_bench_schedules`` unless
``DATABASE_URL`` names another), with the queue's clock frozen and moved by hand: declares
``--schedules`` daily cron schedules in ``RATEQUEUE["SCHEDULES"]``, ``--due`` of them at
03:00 UTC and the others spread over the other minutes of the day, all running a no-op
job on a paused queue (so that the steps measured enqueue runs and start nothing). The
leader's first step syncs them into the table (then ANALYZE: the benchmark's PostgreSQL
runs without autovacuum). Then, per repeat:

- empty steps: the loop stepped at 02:59:30, when nothing is due (median of 200 steps);
- the due minute: the clock moved to 03:00:00 and the loop stepped until it rests, every
  step timed; the runs it enqueued counted.

Reported: the empty step, the due minute's steps in all, per enqueued run, and that per
run cost against the empty step; also 1,000 plain ``enqueue()`` calls of the same job
with ids, for scale. The runs are deleted and the schedules moved back between repeats.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bench.common import machine_lines, prepare_database, version

DATABASE = "postgres://root@127.0.0.1:5432/ratequeue_bench_schedules"
TARGET = 1.2
QUEUE = "bench-schedules-paused"
JOB = "bench.jobs.noop"
DUE_AT = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
BEFORE = datetime(2026, 11, 27, 2, 59, 30, tzinfo=UTC)
EMPTY_STEPS = 200


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


def declarations(schedules: int, due: int) -> dict[str, dict[str, Any]]:
    """Return the schedules: ``due`` at 03:00 UTC, the others at other minutes of the day."""
    declared = {}
    other_minutes = [m for m in range(24 * 60) if m != 3 * 60]
    for n in range(schedules):
        minute = 3 * 60 if n < due else other_minutes[n % len(other_minutes)]
        declared[f"bench-{n:05d}"] = {
            "function": JOB,
            "cron": f"{minute % 60} {minute // 60} * * *",
            "options": {"queue": QUEUE},
            "misfire": "skip",
        }
    return declared


class FrozenClock:
    """The queue's clock, standing still at ``moment`` until moved."""

    def __init__(self) -> None:
        from django_ratequeue import clock

        self.moment = BEFORE
        clock.now = lambda: self.moment
        clock.timestamp = lambda: self.moment.timestamp()


def new_loop() -> Any:
    """Lead the loop from a new generation, in this process."""
    from django.db.models import F

    from django_ratequeue.engine.loop import Loop
    from django_ratequeue.engine.models import LoopState

    generation = LoopState.objects.ensure().generation + 1
    LoopState.objects.update(generation=F("generation") + 1)
    return Loop(generation)


def analyze() -> None:
    from django.db import connection

    from django_ratequeue.engine.models import Job
    from django_ratequeue.plugins.schedules.models import Schedule

    with connection.cursor() as cursor:
        for model in (Schedule, Job):
            cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def timed_steps(loop: Any, count: int) -> list[float]:
    """Step ``count`` times; return each step's seconds."""
    durations = []
    for _ in range(count):
        began = time.perf_counter()
        loop.step()
        durations.append(time.perf_counter() - began)
    return durations


def statements(loop: Any) -> list[str]:
    """Step once; return the first two words of each statement the step sent."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        loop.step()
    words = [query["sql"].split() for query in queries]
    return [w[0] if w[0] == "SAVEPOINT" else " ".join(w[:2]) for w in words]


def due_minute(loop: Any, clock: FrozenClock) -> tuple[list[float], int]:
    """Move the clock to the due minute, step until the loop rests; the steps and the runs."""
    from django_ratequeue.engine.models import Job

    clock.moment = DUE_AT
    durations = []
    while True:
        began = time.perf_counter()
        loop.step()
        durations.append(time.perf_counter() - began)
        if loop.rested:
            return durations, Job.objects.filter(queue=QUEUE).count()


def statement_counts(loop: Any, clock: FrozenClock) -> str:
    """Return the statements of an empty step and of a due minute's steps, per run."""
    from django_ratequeue.engine.models import Job

    empty = statements(loop)
    clock.moment = DUE_AT
    due: list[str] = []
    while True:
        due += statements(loop)
        if loop.rested:
            break
    runs = Job.objects.filter(queue=QUEUE).count()
    kinds = ", ".join(f"{n} {kind}" for kind, n in Counter(due).most_common())
    return (
        f"statements: empty step {len(empty)} ({', '.join(empty)}); due minute "
        f"{len(due)} for {runs:,} runs, {(len(due) - len(empty)) / max(runs, 1):.2f} per run "
        f"beyond an empty step ({kinds})"
    )


def reset(clock: FrozenClock) -> None:
    """Delete the runs, and make the due schedules due at 03:00 again."""
    from django_ratequeue.engine.models import Job
    from django_ratequeue.plugins.schedules.models import Schedule

    Job.objects.filter(queue=QUEUE).delete()
    Schedule.objects.filter(cron="0 3 * * *").update(next_run_at=DUE_AT, runs=0)
    clock.moment = BEFORE
    analyze()


def plain_enqueues(count: int) -> float:
    """Seconds for ``count`` enqueue() calls of the job with ids, as the runs are made."""
    from django_ratequeue import enqueue
    from django_ratequeue.engine.models import Job

    began = time.perf_counter()
    for n in range(count):
        enqueue(JOB, queue=QUEUE, id=f"plain-{n}", on_duplicate_id="ignore")
    elapsed = time.perf_counter() - began
    Job.objects.filter(queue=QUEUE).delete()
    return elapsed


def measure(args: argparse.Namespace) -> None:
    from django.conf import settings
    from django.test import override_settings

    from bench.harness import empty_tables
    from django_ratequeue.plugins.schedules.models import Schedule

    configured = {
        **settings.RATEQUEUE,
        "QUEUES": {**settings.RATEQUEUE.get("QUEUES", {}), QUEUE: {"paused": True}},
    }
    clock = FrozenClock()
    with override_settings(RATEQUEUE={**configured, "SCHEDULES": {}}):
        empty_tables()
        Schedule.objects.all().delete()
        loop = new_loop()
        loop.step()
        bare = statistics.median(timed_steps(loop, EMPTY_STEPS))
    print(f"empty step, no schedules: {bare * 1000:.3f} ms (median of {EMPTY_STEPS})")
    schedules = declarations(args.schedules, args.due)
    with override_settings(RATEQUEUE={**configured, "SCHEDULES": schedules}):
        began = time.perf_counter()
        loop = new_loop()
        loop.step()
        print(f"synced {args.schedules:,} schedules in {time.perf_counter() - began:.1f} s")
        analyze()
        ratios = []
        for repeat in range(args.repeats):
            empty = statistics.median(timed_steps(loop, EMPTY_STEPS))
            steps, runs = due_minute(loop, clock)
            per_run = sum(steps) / max(runs, 1)
            ratios.append(per_run / empty)
            print(
                f"repeat {repeat + 1}: empty step {empty * 1000:.3f} ms; due minute: {runs:,} "
                f"runs in {len(steps)} steps, {sum(steps) * 1000:.0f} ms, "
                f"{per_run * 1000:.3f} ms per run = {per_run / empty:.2f}x the empty step"
            )
            reset(clock)
        print(statement_counts(loop, clock))
        reset(clock)
        plain = plain_enqueues(args.due)
    print(
        f"{args.due:,} plain enqueue() calls with ids: {plain * 1000:.0f} ms, "
        f"{plain / args.due * 1000:.3f} ms each"
    )
    median = statistics.median(ratios)
    verdict = "met" if median <= TARGET else "missed"
    print(f"per run / empty step, median of {len(ratios)}: {median:.2f}x")
    print(f"target: at most {TARGET}x: {verdict}")
    empty_tables()
    Schedule.objects.all().delete()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DATABASE_URL", DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    database = prepare_database()
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"Python {platform.python_version()}, Django {version('django')}, "
                f"psycopg {version('psycopg')}",
                "command: python -m bench.schedules " + " ".join(argv or []),
            ]
        ),
        flush=True,
    )
    measure(args)
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""A batch of no-op jobs against the same jobs without a batch (issue 22, part 4).

    .venv/bin/python -m bench.batches                  # 10,000 jobs, 3 runs of each, medians
    .venv/bin/python -m bench.batches --jobs 1000 --repeats 1   # smoke run

Each run enqueues the jobs with ``enqueue_many`` (with ``batch={"on_complete": ...}`` for
the batch), ANALYZEs the tables (the shared server runs with autovacuum off), then starts
one ``manage.py qcluster`` (two workers) and times it. Plain: until the last job is
complete. Batch: until its callback is complete, which is created when the last job
ends. Both from the workers' start, and from the first job's end to the last job's (the
callback's), by the jobs' ``finished_at``: the workers' start-up left out. The two
alternate, so that the machine's load falls on both alike; the report gives each run,
the medians side by side and their ratio (the target: at most 1.1).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from bench.common import machine_lines, prepare_database
from bench.harness import Workers, empty_tables, terminate
from bench.queue import OURS, analyze, workers

PLAIN, BATCH = "plain", "batch"


def fill(kind: str, count: int) -> Callable[[], bool]:
    """Enqueue ``count`` no-op jobs (as one batch for BATCH); return "are they done?".

    Both ask the same question, how many jobs are complete, so that the polling costs
    both alike: the batch is done once its callback, one more job, is complete too."""
    from bench.jobs import noop
    from bench.ratequeue_jobs import batch_done
    from django_ratequeue import enqueue_many
    from django_ratequeue.engine.models import Job, Status

    if kind == PLAIN:
        enqueue_many(noop, [[]] * count)
    else:
        enqueue_many(noop, [[]] * count, batch={"on_complete": batch_done})
    expected = count if kind == PLAIN else count + 1
    return lambda: Job.objects.filter(status=Status.COMPLETE).count() >= expected


def empty() -> None:
    from django.db import connection

    from django_ratequeue.plugins.batches.models import Batch

    empty_tables()
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {connection.ops.quote_name(Batch._meta.db_table)}")


def wait(done: Callable[[], bool], running: Workers, timeout: float) -> float:
    """Poll ``done()`` every 20 ms; return the seconds from the workers' start until it held."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done within {timeout:g} s")
        running.check_alive()
        time.sleep(0.02)
    return time.monotonic() - running.started_at


def finishing_span() -> float:
    """Return the seconds from the first job finished to the last (the callback included)."""
    from django.db.models import Max, Min

    from django_ratequeue.engine.models import Job

    span = Job.objects.aggregate(first=Min("finished_at"), last=Max("finished_at"))
    return float((span["last"] - span["first"]).total_seconds())


def run(kind: str, count: int) -> tuple[float, float]:
    """Return the seconds from the workers' start to the end, and from the first job's end."""
    empty()
    done = fill(kind, count)
    analyze(OURS)
    with workers(OURS) as running:
        seconds = wait(done, running, 60 + count / 20)
    span = finishing_span()
    print(
        f"  {kind}: {count:,} jobs in {seconds:.2f} s from the workers' start; "
        f"{span:.2f} s from the first job's end ({count / span:,.0f}/s)",
        flush=True,
    )
    return seconds, span


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    database = prepare_database()
    command = " ".join(["python -m bench.batches", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*machine_lines(database), f"command: {command}"]), flush=True)
    times: dict[str, list[tuple[float, float]]] = {PLAIN: [], BATCH: []}
    for _ in range(args.repeats):
        for kind in (PLAIN, BATCH):
            times[kind].append(run(kind, args.jobs))
    for index, what in enumerate(["from the workers' start", "from the first job's end"]):
        plain, batch = (statistics.median(t[index] for t in times[k]) for k in (PLAIN, BATCH))
        print(
            f"median of {args.repeats}, {what}: without a batch {plain:.2f} s, as a batch "
            f"{batch:.2f} s; batch / plain = {batch / plain:.3f} (target ≤ 1.1)"
        )
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average after: {load}")


if __name__ == "__main__":
    main()

"""Many clusters on one database: does dispatch grow with them, or is one process the ceiling?

    DATABASE_URL=postgres://root@127.0.0.1:5432/ratequeue_bench_clusters \\
        .venv/bin/python -m bench.clusters                 # 4 clusters, then 1
    .venv/bin/python -m bench.clusters --quick             # smoke run

For each count of ``--clusters``, the bench starts that many ``manage.py qcluster`` (each
``--workers`` worker processes, as separate hosts would run them) on one database, waits
until every worker process serves, then enqueues ``--jobs`` ``pause(--ms)`` jobs spread over
``--queues`` queues (each limited to ``--per-queue`` at once, ``MAX_CONCURRENCY``
``--concurrency``) and times them from the enqueue to the last completed. It reports the
jobs per second, the CPU of every worker process over that time (from /proc): the
busiest one's share of a core and of all the workers' CPU (with one process deciding every
start, that share and the throughput stay where they are however many clusters run), and
what the database wrote per job: bytes of WAL and commits (pg_stat_database, which counts
the enqueue and the bench's own reads too), the figures of the next ceiling.

The tables are emptied before each run and ANALYZEd after the enqueue (the shared server's
autovacuum is off).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.common import machine_lines, prepare_database
from bench.harness import Workers, empty_tables, group_pids, stat_fields, terminate, timeline
from bench.steady import CLOCK_TICK


@dataclass(frozen=True)
class Run:
    """What one count of clusters did: jobs, seconds, the workers' CPU seconds by process."""

    clusters: int
    jobs: int
    seconds: float
    cpu: dict[int, float]
    # What the database wrote meanwhile: bytes of WAL and transactions committed.
    wal_bytes: int
    commits: int

    def __str__(self) -> str:
        total = sum(self.cpu.values()) or 1.0
        busiest = max(self.cpu.values(), default=0.0)
        return (
            f"{self.clusters} cluster(s), {len(self.cpu)} processes busy: "
            f"{self.jobs / self.seconds:,.0f} jobs/s ({self.jobs} in {self.seconds:.1f} s); "
            f"the busiest process used {busiest / self.seconds:.0%} of a core, "
            f"{busiest / total:.0%} of the workers' CPU"
            f" ({total / self.jobs * 1000:.2f} ms a job); "
            f"the database: {self.wal_bytes / self.jobs / 1024:.1f} KiB of WAL and "
            f"{self.commits / self.jobs:.1f} commits a job"
        )


def cpu_by_process(leaders: Sequence[int]) -> dict[int, float]:
    """Return each process's user and system CPU seconds, in the groups ``leaders`` lead."""
    seconds = {}
    for pid in group_pids(leaders):
        fields = stat_fields(pid)
        if fields is not None:
            seconds[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICK
    return seconds


def written() -> tuple[int, int]:
    """Return the WAL's position (bytes) and the database's commits so far."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_current_wal_lsn() - '0/0', xact_commit FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
        wal, commits = cursor.fetchone()
    return int(wal), int(commits)


def wait_until(condition: Any, timeout: float, what: str, workers: list[Workers]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for cluster in workers:
            cluster.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.05)


def serving(expected: int) -> bool:
    from django_ratequeue.engine.models import WorkerHeartbeat

    return WorkerHeartbeat.objects.filter(serving=True).count() >= expected


def completed() -> int:
    from django_ratequeue import Status
    from django_ratequeue.engine.models import Job

    return Job.objects.filter(status=Status.COMPLETE).count()


def enqueue(args: argparse.Namespace) -> None:
    """Enqueue the jobs, the queues taking them in turn, and ANALYZE the tables."""
    from django.db import connection

    from bench.jobs import pause
    from django_ratequeue import enqueue_many
    from django_ratequeue.engine.models import Attempt, Job

    per_queue, extra = divmod(args.jobs, args.queues)
    for index in range(args.queues):
        count = per_queue + (index < extra)
        enqueue_many(pause, [[args.ms]] * count, queue=f"q{index}")
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in (Job, Attempt))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {tables}")


def run(clusters: int, args: argparse.Namespace) -> Run:
    """Start ``clusters`` clusters, drain the jobs through them, and stop them."""
    empty_tables()
    started = [
        Workers([["qcluster"]], {"BENCH_WORKERS": str(args.workers)}) for _ in range(clusters)
    ]
    try:
        wait_until(lambda: serving(clusters * args.workers), 60, "the workers", started)
        leaders = [p.pid for cluster in started for p in cluster.processes]
        before, (wal, commits) = cpu_by_process(leaders), written()
        began = time.monotonic()
        enqueue(args)
        wait_until(lambda: completed() >= args.jobs, args.timeout, "the jobs", started)
        seconds = time.monotonic() - began
        after, (wal_after, commits_after) = cpu_by_process(leaders), written()
    finally:
        for cluster in started:
            cluster.kill()
    cpu = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    busy = {pid: s for pid, s in cpu.items() if s > 0}
    return Run(clusters, args.jobs, seconds, busy, wal_after - wal, commits_after - commits)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    queues = {f"q{i}": {"max_concurrency": args.per_queue} for i in range(args.queues)}
    return {"MAX_CONCURRENCY": args.concurrency, "QUEUES": queues}


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.clusters",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--clusters", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--workers", type=int, default=2, help="worker processes per cluster")
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--per-queue", type=int, default=4, help="each queue's max_concurrency")
    parser.add_argument("--concurrency", type=int, default=64, help="MAX_CONCURRENCY")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ms", type=float, default=1, help="each job's run time")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run, at most")
    parser.add_argument("--quick", action="store_true", help="smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.clusters, args.jobs, args.queues = [2, 1], 400, 10
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_RATEQUEUE"] = json.dumps(settings(args))
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    database = prepare_database()
    command = " ".join(["python -m bench.clusters", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*machine_lines(database), f"command: {command}"]), flush=True)
    for clusters in args.clusters:
        print(f"- {run(clusters, args)}", flush=True)
        print(f"    {timeline()}", flush=True)


if __name__ == "__main__":
    main()

"""No-op jobs end to end with metrics and tracing on against the same jobs with them off
(issue 23, part 5).

    .venv/bin/python -m bench.overhead                  # 10,000 jobs, 3 runs of each, medians
    .venv/bin/python -m bench.overhead --jobs 1000 --repeats 1   # smoke run

Each run enqueues the jobs with ``enqueue_many`` (in a child process, so that it can have
OpenTelemetry's SDK or not), ANALYZEs the tables (the shared server runs with autovacuum
off), then starts one ``manage.py qcluster`` (the default settings, two workers) and times
it until the last job is complete; also from the first job's end to the last's, by the
jobs' ``finished_at``, the workers' start-up left out.

OFF: no tracer provider (OpenTelemetry's API is installed, its spans are no-ops), no
receiver of the lifecycle signals, no scrape. ON: ``RATEQUEUE_BENCH_TRACING=1`` in the
enqueuing and the cluster's processes (bench.observed: the SDK's tracer provider, a batch
processor and an exporter that drops the spans, and a receiver on every lifecycle signal),
and a thread here that scrapes the Prometheus metrics once a second while the run lasts.
The two alternate, so that the machine's load falls on both alike; the report gives each
run, the medians side by side and their ratio (the target: at most 1.03).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from bench.batches import finishing_span, wait
from bench.common import machine_lines, prepare_database
from bench.harness import ROOT, Workers, empty_tables, terminate
from bench.queue import OURS, analyze

OFF, ON = "off", "on"
SWITCH = "RATEQUEUE_BENCH_TRACING"


def enqueue(kind: str, count: int) -> None:
    """Enqueue ``count`` no-op jobs in a child process, observed or not as ``kind`` says."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        SWITCH: "1" if kind == ON else "0",
    }
    command = [sys.executable, "-m", "bench.overhead", "--enqueue-only", "--jobs", str(count)]
    subprocess.run(command, cwd=ROOT, env=env, check=True)


def enqueue_here(count: int) -> None:
    from bench.jobs import noop
    from django_ratequeue import enqueue_many

    enqueue_many(noop, [[]] * count)


def scrape_once() -> int:
    """Answer one Prometheus scrape as the metrics view does; return the body's length."""
    from django.test import RequestFactory

    from django_ratequeue.contrib.prometheus import metrics_view

    response = metrics_view(RequestFactory().get("/metrics"))
    return len(response.content)


@contextmanager
def scraping(kind: str) -> Iterator[list[int]]:
    """Scrape once a second from a thread while the block runs (ON only); yield the sizes."""
    sizes: list[int] = []
    stop = threading.Event()

    def scrape() -> None:
        from django.db import connection

        try:
            while not stop.wait(1.0):
                sizes.append(scrape_once())
        finally:
            connection.close()

    thread = threading.Thread(target=scrape, daemon=True)
    if kind == ON:
        thread.start()
    try:
        yield sizes
    finally:
        stop.set()
        if kind == ON:
            thread.join()


def run(kind: str, count: int) -> tuple[float, float]:
    """Return the seconds from the workers' start to the end, and from the first job's end."""
    from django_ratequeue.engine.models import Job, Status

    empty_tables()
    enqueue(kind, count)
    analyze(OURS)
    done: Callable[[], bool] = lambda: Job.objects.filter(status=Status.COMPLETE).count() >= count  # noqa: E731
    running = Workers([["qcluster"]], {SWITCH: "1" if kind == ON else "0"})
    try:
        with scraping(kind) as sizes:
            seconds = wait(done, running, 60 + count / 20)
    finally:
        running.kill()
    span = finishing_span()
    scrapes = f"; {len(sizes)} scrapes" if kind == ON else ""
    print(
        f"  {kind}: {count:,} jobs in {seconds:.2f} s from the workers' start; "
        f"{span:.2f} s from the first job's end ({count / span:,.0f}/s){scrapes}",
        flush=True,
    )
    return seconds, span


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--enqueue-only", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def report(times: dict[str, list[tuple[float, float]]], repeats: int) -> None:
    for index, what in enumerate(["from the workers' start", "from the first job's end"]):
        off, on = (statistics.median(t[index] for t in times[k]) for k in (OFF, ON))
        print(
            f"median of {repeats}, {what}: off {off:.2f} s, on {on:.2f} s; "
            f"on / off = {on / off:.3f} (target ≤ 1.03)"
        )
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average after: {load}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    if args.enqueue_only:
        enqueue_here(args.jobs)
        return
    database = prepare_database()
    command = " ".join(["python -m bench.overhead", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*machine_lines(database), f"command: {command}"]), flush=True)
    times: dict[str, list[tuple[float, float]]] = {OFF: [], ON: []}
    for _ in range(args.repeats):
        for kind in (OFF, ON):
            times[kind].append(run(kind, args.jobs))
    report(times, args.repeats)


if __name__ == "__main__":
    main()

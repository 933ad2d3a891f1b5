"""The admin dashboard on a 1,000,000-job database: how long a load takes (issue 13's
target: under 200 ms).

    .venv/bin/python -m bench.dashboard             # about a minute
    .venv/bin/python -m bench.dashboard --quick     # smoke run (100,000 jobs)

Fills the benchmark database (``ratequeue_bench_dashboard`` unless ``DATABASE_URL`` names
another; PostgreSQL) as the dashboard's plan tests fill theirs
(:func:`tests.dashboard.plans.fill_jobs`: jobs over a week in 20 queues, 90% complete, an
attempt for every fifth, a week of per-minute figures; then VACUUM ANALYZE, as autovacuum
leaves a production table), then times N loads of the dashboard page and of its live body
(what the open page fetches every few seconds), for the last hour and the last day,
through Django's test client (no server: the request's own cost) as a staff user, after
a warm-up load of each. Also timed: :func:`snapshot` alone (the reads), so that what the
rendering adds shows. The tables are emptied afterwards.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from bench.common import machine_lines, prepare_database, version

DATABASE = "postgres://root@127.0.0.1:5432/ratequeue_bench_dashboard"
TARGET_MS = 200.0
WINDOWS: tuple[Literal["hour", "day"], ...] = ("hour", "day")


@dataclass(frozen=True)
class Timing:
    what: str
    window: str
    seconds: list[float]
    statements: int

    def percentile(self, p: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    def row(self) -> str:
        median, p95 = statistics.median(self.seconds) * 1000, self.percentile(95) * 1000
        verdict = "ok" if p95 < TARGET_MS else "over"
        return (
            f"{self.what:<14} {self.window:<5} {median:>8.0f} {p95:>8.0f} "
            f"{max(self.seconds) * 1000:>8.0f} {self.statements:>11}   {verdict}"
        )


def timed(what: str, window: str, load: Callable[[], object], loads: int) -> Timing:
    """``load`` once to warm up and count its statements, then ``loads`` times timed."""
    from django.db import connection

    sent: list[str] = []

    def count(execute: Callable[..., object], sql: str, *args: object) -> object:
        sent.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(count):
        load()
    seconds = []
    for _ in range(loads):
        start = time.perf_counter()
        load()
        seconds.append(time.perf_counter() - start)
    return Timing(what, window, seconds, len(sent))


def measure(loads: int) -> list[Timing]:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from django_ratequeue.monitor.snapshot import snapshot

    user, _created = User.objects.get_or_create(
        username="bench-dashboard", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    pages = {
        "page": reverse("admin:django_ratequeue_job_dashboard"),
        "live body": reverse("admin:django_ratequeue_job_dashboard_live"),
    }

    def get(url: str, window: str) -> Callable[[], object]:
        def load() -> object:
            response = client.get(url, {"window": window})
            if response.status_code != 200:
                raise RuntimeError(f"{url}?window={window}: {response.status_code}")
            return response

        return load

    timings = []
    for window in WINDOWS:
        for what, url in pages.items():
            timings.append(timed(what, window, get(url, window), loads))
        timings.append(timed("snapshot()", window, partial(snapshot, window), loads))
    return timings


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dashboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs in the table")
    parser.add_argument("--loads", type=int, default=30, help="timed loads of each")
    parser.add_argument("--quick", action="store_true", help="smoke run: 100,000 jobs, 5 loads")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.loads = min(args.jobs, 100_000), 5
    if min(args.jobs, args.loads) < 1:
        parser.error("every count must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DATABASE_URL", DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_ADMIN"] = "1"
    import django

    django.setup()
    from django.db import connection

    from tests.dashboard.plans import empty_tables, fill_jobs

    database = prepare_database()
    if connection.vendor != "postgresql":
        sys.exit("bench.dashboard fills its table with PostgreSQL's SQL: set a postgres:// URL.")
    command = " ".join(["python -m bench.dashboard", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"Python {platform.python_version()}, Django {version('django')}, "
                f"psycopg {version('psycopg')}",
                f"command: {command}",
            ]
        ),
        flush=True,
    )
    empty_tables()
    started = time.monotonic()
    fill_jobs(args.jobs)
    print(f"filled {args.jobs:,} jobs in {time.monotonic() - started:.0f} s", flush=True)
    try:
        timings = measure(args.loads)
    finally:
        empty_tables()
    print(
        f"\n{args.loads} loads each (ms); target: under {TARGET_MS:.0f} ms (p95 shown against it)"
    )
    print(f"{'':<14} {'':<5} {'median':>8} {'p95':>8} {'max':>8} {'statements':>11}")
    for timing in timings:
        print(timing.row())
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()

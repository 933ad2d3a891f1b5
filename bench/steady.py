"""Steady traffic: a producer enqueuing one short job at a time at a fixed rate while the
workers run, ours against procrastinate in the same run.

    .venv/bin/python -m bench.steady                      # 200 jobs/s, then the highest rate
    .venv/bin/python -m bench.steady --quick              # smoke run
    .venv/bin/python -m bench.steady --private            # on a private PostgreSQL server
                                                          # with pg_stat_statements
    .venv/bin/python -m bench.steady --rates 200 --seconds 1800 --only ours  # a long run

Also ``python -m bench.queue --steady [...]``. A producer process (or ``--producers`` of
them, sharing the rate) enqueues ``pause(ms)`` jobs one call each, on a fixed timetable
(late calls are made at once, none skipped). Ours runs ``manage.py qcluster`` (the example
project's two worker processes) with ``MAX_CONCURRENCY`` ``--concurrency``; procrastinate
one worker with ``--concurrency``. After ``--warmup`` seconds the bench measures, over the
rest of the run: the jobs completed per second, whether that kept up with what was offered
(at least 97% of the jobs created in the window completed in it, and the median pickup
under a second), pickup (enqueue → start, from each queue's own timestamps: ours' job
creation and attempt start, procrastinate's ``deferred`` and ``started`` events), and CPU
per job: the workers' processes (all of their process group, from /proc), PostgreSQL's
processes (every ``postgres`` process of the server, so other databases' work counts too:
run it on a quiet server, or ``--private``), and the producers. With pg_stat_statements
(``--private`` loads it) it counts statements per job, and ``--profile`` lists ours' costliest.

The tables are not ANALYZEd before or during a run: a queue meets new tables and long
runs without a helping hand, and the shared server's autovacuum is off (say which server
the run used when you record its figures). ``--private`` starts a PostgreSQL server of
its own (initdb in a temporary directory, autovacuum on, pg_stat_statements loaded, run
as the ``postgres`` user), and removes it at the end.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import harness
from bench.common import machine_lines, prepare_database, version
from bench.harness import (
    ROOT,
    Workers,
    empty_tables,
    group_pids,
    stat_fields,
    terminate,
    timeline,
)

OURS, PROCRASTINATE = "ours", "procrastinate"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
PRIVATE_PORT = 5499


# -- CPU, from /proc --------------------------------------------------------------------------


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU of ``pids``, with that of their children already reaped."""
    total = 0
    for pid in pids:
        fields = stat_fields(pid)
        if fields is not None:
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICK


def postgres_pids() -> list[int]:
    """Every process called ``postgres`` (the server's postmaster and backends)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError), open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() == "postgres":
                    found.append(int(entry))
    return found


@dataclass
class Cpu:
    workers: float
    postgres: float

    @classmethod
    def read(cls, workers: Workers) -> Cpu:
        leaders = [process.pid for process in workers.processes]
        return cls(cpu_seconds(group_pids(leaders)), cpu_seconds(postgres_pids()))

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.workers - other.workers, self.postgres - other.postgres)


# -- the producer -----------------------------------------------------------------------------


def submitter(contender: str, ms: float) -> Any:
    """The one-call enqueue of a ``pause(ms)`` job."""
    if contender == OURS:
        from bench.jobs import pause
        from django_ratequeue import enqueue

        return lambda: enqueue(pause, args=[ms])
    from bench.procrastinate_app import app
    from bench.procrastinate_app import pause as task

    app.open()
    return lambda: task.defer(ms=ms)


def produce(contender: str, rate: float, seconds: float, ms: float, start: Any, out: Any) -> None:
    """A producer process: enqueue at ``rate`` for ``seconds`` after the common start, on a
    fixed timetable (a late call is made at once); put back its calls and its CPU."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    submit = submitter(contender, ms)
    start.wait()
    began = time.monotonic()
    calls = int(rate * seconds)
    for call in range(calls):
        due = began + call / rate
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        submit()
    times = os.times()
    out.put((calls, times.user + times.system))


# -- what each queue's tables say -------------------------------------------------------------


class Ours:
    name = OURS

    def workers(self, concurrency: int) -> Workers:
        empty_tables()
        return Workers([["qcluster"]], {"BENCH_MAX_CONCURRENCY": str(concurrency)})

    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def done(self) -> int:
        return int(
            self._rows("SELECT count(*) FROM django_ratequeue_job WHERE status = 'complete'", [])[
                0
            ][0]
        )

    def window(self, since: float, until: float) -> tuple[int, int, list[float]]:
        """Jobs created and completed between the two wall-clock times, and the pickups
        (seconds) of the jobs created then that started."""
        created, completed = self._rows(
            "SELECT (SELECT count(*) FROM django_ratequeue_job"
            " WHERE created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)),"
            " (SELECT count(*) FROM django_ratequeue_job WHERE"
            " finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)"
            " AND status = 'complete')",
            [since, until, since, until],
        )[0]
        pickups = self._rows(
            "SELECT EXTRACT(EPOCH FROM a.started_at - j.created_at) FROM django_ratequeue_job j"
            " JOIN django_ratequeue_attempt a ON a.job_id = j.id AND a.number = 1"
            " WHERE j.created_at >= to_timestamp(%s) AND j.created_at < to_timestamp(%s)"
            " AND a.started_at IS NOT NULL",
            [since, until],
        )
        return int(created), int(completed), [float(p) for (p,) in pickups]

    def database(self) -> str:
        from django.db import connection

        return str(connection.settings_dict["NAME"])

    def timeline(self) -> str:
        return timeline()

    def clear(self) -> None:
        empty_tables()


class Procrastinate:
    name = PROCRASTINATE

    def __init__(self) -> None:
        from bench import procrastinate_app

        self.app = procrastinate_app

    def workers(self, concurrency: int) -> Workers:
        self.app.empty()
        return Workers([self.app.worker_command(concurrency)], {})

    def done(self) -> int:
        rows = self.app.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
        return int(rows[0][0])

    def window(self, since: float, until: float) -> tuple[int, int, list[float]]:
        created, completed = self.app.execute(
            "SELECT count(*) FILTER (WHERE type = 'deferred'), "
            "count(*) FILTER (WHERE type = 'succeeded') FROM procrastinate_events"
            " WHERE at >= to_timestamp(%s) AND at < to_timestamp(%s)",
            [since, until],
        )[0]
        pickups = self.app.execute(
            "SELECT EXTRACT(EPOCH FROM s.at - d.at) FROM procrastinate_events d"
            " JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started'"
            " WHERE d.type = 'deferred' AND d.at >= to_timestamp(%s) AND d.at < to_timestamp(%s)",
            [since, until],
        )
        return int(created), int(completed), [float(p) for (p,) in pickups]

    def database(self) -> str:
        return self.app.database_name()

    def timeline(self) -> str:
        return ""

    def clear(self) -> None:
        self.app.empty()


# -- statements, from pg_stat_statements ------------------------------------------------------


def statements_ready() -> bool:
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cursor.execute("SELECT pg_stat_statements_reset()")
    except Exception:
        return False
    return True


def statements(database: str, top: int = 0) -> tuple[int, float, float, list[str]]:
    """The statements run in ``database`` since the last reset, the milliseconds the server
    spent planning and executing them, and the ``top`` costliest."""
    from django.db import connection

    where = "dbid = (SELECT oid FROM pg_database WHERE datname = %s)"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(total_plan_time), 0),"
            f" coalesce(sum(total_exec_time), 0) FROM pg_stat_statements WHERE {where}",
            [database],
        )
        calls, planning, executing = cursor.fetchone()
        cursor.execute(
            "SELECT calls, total_plan_time + total_exec_time, rows,"
            " regexp_replace(query, '\\s+', ' ', 'g')"
            f" FROM pg_stat_statements WHERE {where}"
            " ORDER BY total_plan_time + total_exec_time DESC LIMIT %s",
            [database, top],
        )
        lines = [
            f"{n:>7} calls {total:9.0f} ms {total / max(n, 1):6.2f} ms/call {rows:>7} rows"
            f"  {query[:150]}"
            for n, total, rows, query in cursor.fetchall()
        ]
    return int(calls), float(planning), float(executing), lines


# -- one run ----------------------------------------------------------------------------------


@dataclass
class Run:
    contender: str
    rate: float
    created: int
    completed: int
    window: float
    pickups: list[float]
    cpu: Cpu
    producer_cpu: float
    jobs: int
    statements: int | None

    @property
    def completed_per_second(self) -> float:
        return self.completed / self.window

    @property
    def kept_up(self) -> bool:
        return self.completed >= 0.97 * self.created and self.percentile(50) < 1.0

    def percentile(self, p: float) -> float:
        if not self.pickups:
            return float("inf")
        ordered = sorted(self.pickups)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]

    def per_job(self, seconds: float) -> float:
        return 1000 * seconds / max(self.jobs, 1)

    def __str__(self) -> str:
        statements = (
            ""
            if self.statements is None
            else f", {self.statements / max(self.jobs, 1):.1f} statements"
        )
        return (
            f"{self.completed_per_second:.0f}/s of {self.rate:g}/s"
            f"{'' if self.kept_up else ' (FELL BEHIND)'};"
            f" pickup p50 {1000 * self.percentile(50):.0f} ms,"
            f" p99 {1000 * self.percentile(99):.0f} ms;"
            f" per job: CPU {self.per_job(self.cpu.workers):.1f} ms"
            f" workers + {self.per_job(self.cpu.postgres):.1f} ms PostgreSQL"
            f" (+ {self.per_job(self.producer_cpu):.1f} ms producer){statements}"
        )


def run(contender: Ours | Procrastinate, rate: float, args: argparse.Namespace) -> Run:
    """Start the workers, warm them, produce at ``rate`` for ``args.seconds``, measure."""
    import multiprocessing

    running = contender.workers(args.concurrency)
    try:
        warm(contender, running, args)
        context = multiprocessing.get_context("spawn")
        start = context.Barrier(args.producers + 1)
        out = context.Queue()
        each = rate / args.producers
        producers = [
            context.Process(
                target=produce, args=(contender.name, each, args.seconds, args.ms, start, out)
            )
            for _ in range(args.producers)
        ]
        for producer in producers:
            producer.start()
        counting = statements_ready() if args.statements else False
        start.wait(timeout=120)
        began = time.time()
        done_before, cpu_before = contender.done(), Cpu.read(running)
        sums = collect(out, len(producers), contender, running, args)
        for producer in producers:
            producer.join(timeout=10)
        ended = time.time()
        # The jobs still waiting get their chance to finish (their CPU is theirs).
        deadline = time.monotonic() + 10
        calls = sum(calls for calls, _ in sums)
        while contender.done() - done_before < calls and time.monotonic() < deadline:
            running.check_alive()
            time.sleep(0.1)
        cpu, jobs = Cpu.read(running) - cpu_before, contender.done() - done_before
        executed = None
        if counting:
            executed, planning, executing, lines = statements(contender.database(), 14)
            print(
                f"    the server's time per job: planning {planning / max(jobs, 1):.2f} ms,"
                f" executing {executing / max(jobs, 1):.2f} ms"
            )
            if args.profile:
                for line in lines:
                    print(f"    {line}")
        created, completed, pickups = contender.window(began + args.warmup, ended)
        if contender.timeline():
            print(f"    {contender.timeline()}")
        return Run(
            contender.name,
            rate,
            created,
            completed,
            ended - began - args.warmup,
            pickups,
            cpu,
            sum(seconds for _, seconds in sums),
            jobs,
            executed,
        )
    finally:
        running.kill()
        contender.clear()


def collect(
    out: Any, producers: int, contender: Ours | Procrastinate, running: Workers, args: Any
) -> list[tuple[int, float]]:
    """Wait for the producers' sums; every ``args.report_every`` seconds meanwhile, print
    that interval's completed jobs, CPU per job and pickup (a long run's drift)."""
    sums: list[tuple[int, float]] = []
    deadline = time.monotonic() + args.seconds + 120
    mark = (time.time(), contender.done(), Cpu.read(running))
    while len(sums) < producers:
        wait = args.report_every or max(deadline - time.monotonic(), 0.1)
        try:
            sums.append(out.get(timeout=wait))
            continue
        except queue.Empty:
            if time.monotonic() > deadline:
                raise RuntimeError("the producers did not finish") from None
        now, done, cpu = time.time(), contender.done(), Cpu.read(running)
        jobs, used = done - mark[1], cpu - mark[2]
        pickups = sorted(contender.window(mark[0], now)[2]) or [float("nan")]
        print(
            f"    {now - mark[0]:.0f} s: {jobs / (now - mark[0]):.0f} jobs/s, per job: CPU"
            f" {1000 * used.workers / max(jobs, 1):.1f} ms workers +"
            f" {1000 * used.postgres / max(jobs, 1):.1f} ms PostgreSQL; pickup p50"
            f" {1000 * pickups[len(pickups) // 2]:.0f} ms",
            flush=True,
        )
        mark = (now, done, cpu)
    return sums


def warm(contender: Ours | Procrastinate, running: Workers, args: argparse.Namespace) -> None:
    """Ten jobs through the workers before the clock starts."""
    submit = submitter(contender.name, args.ms)
    for _ in range(10):
        submit()
    deadline = time.monotonic() + 120
    while contender.done() < 10:
        running.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contender.name}: the warm-up jobs did not finish in 120 s")
        time.sleep(0.05)


def highest_rate(contender: Ours | Procrastinate, args: argparse.Namespace) -> tuple[float, str]:
    """The highest of ``args.climb`` rates kept up with (each run ``args.seconds``)."""
    best, seen = 0.0, []
    for rate in args.climb:
        result = run(contender, rate, args)
        seen.append(f"{rate:g}/s → {result.completed_per_second:.0f}/s")
        print(f"  {contender.name} at {rate:g}/s: {result}", flush=True)
        if not result.kept_up:
            break
        best = rate
    return best, ", ".join(seen)


# -- a private server -------------------------------------------------------------------------


@contextmanager
def private_server() -> Iterator[str]:
    """A PostgreSQL server of this run's own (autovacuum on, pg_stat_statements loaded), on
    PRIVATE_PORT; its URL prefix. Removed at the end."""
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    directory = Path(tempfile.mkdtemp(prefix="bench-steady-pg-"))
    shutil.chown(directory, "postgres")
    as_postgres = ["runuser", "-u", "postgres", "--"]
    data = directory / "data"
    subprocess.run(
        [*as_postgres, str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "root"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = (
        f"-p {PRIVATE_PORT} -k {directory} -c listen_addresses=127.0.0.1"
        " -c shared_preload_libraries=pg_stat_statements -c max_connections=200"
        " -c pg_stat_statements.track_planning=on"
    )
    control = [*as_postgres, str(binaries / "pg_ctl"), "-D", str(data), "-w"]
    subprocess.run(
        [*control, "-o", options, "-l", str(directory / "log"), "start"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"postgres://root@127.0.0.1:{PRIVATE_PORT}"
    finally:
        subprocess.run([*control, "-m", "fast", "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(directory, ignore_errors=True)


# -- the command ------------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.steady",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rates", type=float, nargs="+", default=[200], help="offered rates")
    parser.add_argument(
        "--climb",
        type=float,
        nargs="*",
        default=[300, 400, 500, 600, 800, 1000, 1200],
        help="rates tried in turn for the highest kept up with (none: skip)",
    )
    parser.add_argument("--seconds", type=float, default=20, help="producing time per run")
    parser.add_argument("--warmup", type=float, default=3, help="seconds left out of the window")
    parser.add_argument("--ms", type=float, default=1, help="each job's run time")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--producers", type=int, default=1, help="producer processes")
    parser.add_argument("--only", choices=[OURS, PROCRASTINATE])
    parser.add_argument("--private", action="store_true", help="a private PostgreSQL server")
    parser.add_argument("--profile", action="store_true", help="ours' costliest statements")
    parser.add_argument(
        "--report-every", type=float, default=0, help="seconds between interim lines (drift)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.climb = 6, []
    args.statements = args.private or args.profile
    if args.seconds <= args.warmup:
        parser.error("--seconds must exceed --warmup")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    signal.signal(signal.SIGTERM, terminate)
    with private_server() if args.private else nullcontext_url() as server:
        if server:
            os.environ["DATABASE_URL"] = f"{server}/ratequeue_bench"
            os.environ["BENCH_PROCRASTINATE_DSN"] = f"{server}/bench_procrastinate"
        measure(args, argv)


@contextmanager
def nullcontext_url() -> Iterator[str]:
    yield ""


def measure(args: argparse.Namespace, argv: Sequence[str] | None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()

    database = prepare_database()
    contenders: list[Ours | Procrastinate] = []
    if args.only in (None, OURS):
        contenders.append(Ours())
    if args.only in (None, PROCRASTINATE):
        from bench import procrastinate_app

        procrastinate_app.prepare()
        harness.procrastinate_ready = True
        contenders.append(Procrastinate())
    command = " ".join(["python -m bench.steady", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"django-q2 {version('django-q2')}, procrastinate {version('procrastinate')}",
                f"command: {command}",
            ]
        ),
        flush=True,
    )
    os.chdir(ROOT)
    try:
        for rate in args.rates:
            results = {}
            for contender in contenders:
                results[contender.name] = run(contender, rate, args)
                print(f"  {contender.name} at {rate:g}/s: {results[contender.name]}", flush=True)
        for contender in contenders:
            if args.climb:
                best, seen = highest_rate(contender, args)
                print(
                    f"{contender.name}: highest rate kept up with {best:g}/s ({seen})", flush=True
                )
    finally:
        if args.only in (None, PROCRASTINATE):
            from bench import procrastinate_app

            procrastinate_app.drop()


if __name__ == "__main__":
    main()

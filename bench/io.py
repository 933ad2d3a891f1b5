"""IO-bound jobs: many jobs that each wait on the network, ours against procrastinate.

    .venv/bin/python -m bench.io                # 2,000 x 100 ms and 40 x 1 s, 3 repeats
    .venv/bin/python -m bench.io --quick        # smoke run
    .venv/bin/python -m bench.io --slots 32     # RATEQUEUE["SLOTS"], where the setting exists

The bench starts a local HTTP server (asyncio, its own process) that answers each request
after the wait it names. A job makes one request: the sync job on a blocking socket
(``http.client``), the ``async def`` job on asyncio streams (bench.jobs).

Scenario "io": ``--jobs`` jobs of ``--wait-ms`` each, enqueued in one call (ours:
``enqueue_many``; procrastinate: ``batch_defer``) into a queue limited to ``--concurrency``,
timed from the first enqueue to the last finished job. Ours runs on the default two-process
cluster (``manage.py qcluster``, the example project's ``Q_CLUSTER``) with the settings a
user wanting that concurrency writes: ``MAX_CONCURRENCY``, ``MAX_QUEUE_CONCURRENCY`` and the
queue's ``max_concurrency``. procrastinate runs one worker process (``python -m procrastinate
worker --concurrency N``) on a database of its own on the same PostgreSQL server.

Scenario "io-wide": ``--wide-jobs`` jobs of ``--wide-wait-ms`` each, the same way: the wall
time and the most running at once (sampled in the database: started and not ended).

While the jobs run the bench samples the workers' memory (RSS of every process of the
worker's process group, from /proc) and the connections they hold (pg_stat_activity on the
contender's database). Each contender's cluster is warm before the clock starts (it has run
two jobs). Autovacuum may be off (it is on the shared server): the tables are ANALYZEd after
each run. An ``async def`` job this version of ours cannot run (a probe job fails, or
registration refuses it) is reported as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from typing import Any

from bench.common import machine_lines, prepare_database, version
from bench.harness import ROOT, Workers, empty_tables, group_pids, terminate

OURS, PROCRASTINATE = "ours", "procrastinate"
SYNC, ASYNC = "sync", "async def"
DEFAULT_DATABASE = "postgres://root@127.0.0.1:5432/bench_io"
DEFAULT_PROCRASTINATE = "postgres://root@127.0.0.1:5432/bench_procrastinate_io"
QUEUE = "io"


# -- the server the jobs wait on -------------------------------------------------------------


def serve() -> None:
    """The local HTTP server: ``GET /wait?ms=N`` answers after N ms; ``GET /stats`` gives the
    requests open now, the most open at once and those served (``?reset=1`` restarts the
    count). Prints its port on the first line of stdout."""
    state = {"open": 0, "peak": 0, "served": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            target = urllib.parse.urlsplit(head.split(b" ", 2)[1].decode())
            query = urllib.parse.parse_qs(target.query)
            if target.path == "/wait":
                state["open"] += 1
                state["peak"] = max(state["peak"], state["open"])
                try:
                    await asyncio.sleep(int(query["ms"][0]) / 1000)
                finally:
                    state["open"] -= 1
                state["served"] += 1
                body = b"ok"
            else:
                body = json.dumps(state).encode()
                if "reset" in query:
                    state.update(peak=state["open"], served=0)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(body), body)
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, KeyError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())


class Server:
    """The wait server in a process of its own, so that its work is not this process's."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from bench.io import serve; serve()"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def stats(self, reset: bool = False) -> dict[str, int]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", "/stats?reset=1" if reset else "/stats")
            return dict(json.loads(connection.getresponse().read()))
        finally:
            connection.close()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


# -- what the workers hold ------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory(leaders: Sequence[int]) -> dict[int, int]:
    """RSS in KiB of each process of the workers' groups."""
    return {pid: rss_kib(pid) for pid in group_pids(leaders)}


# -- the contenders ----------------------------------------------------------------------------


class Contender:
    """One queue under test: its workers, its enqueue, and what its database says."""

    name: str
    workers: Workers

    def start(self, concurrency: int) -> None: ...
    def enqueue(self, variant: str, tag: str, count: int, port: int, ms: int) -> None: ...
    def counts(self, tag: str) -> tuple[int, int, int]: ...  # (done, running, failed)
    def connections(self) -> int: ...
    def analyze(self) -> None: ...
    def probe(self, variant: str, port: int) -> str: ...  # "" or why the variant cannot run

    def stop(self) -> None:
        self.workers.kill()

    def warm(self, variant: str, port: int) -> None:
        """Two jobs through the cluster before the clock starts: processes up, imports and
        connections made."""
        self.enqueue(variant, "warm", 2, port, 0)
        deadline = time.monotonic() + 120
        while self.counts("warm")[0] < 2:
            self.workers.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the warm-up jobs did not finish in 120 s")
            time.sleep(0.05)


class Ours(Contender):
    name = OURS

    def __init__(self) -> None:
        from django.db import connection

        self.connection = connection

    def start(self, concurrency: int) -> None:
        empty_tables()
        self.workers = Workers([["qcluster"]], {})

    def function(self, variant: str) -> Callable[..., Any]:
        from bench.jobs import await_on_network, wait_on_network

        return wait_on_network if variant == SYNC else await_on_network

    def enqueue(self, variant: str, tag: str, count: int, port: int, ms: int) -> None:
        from django_ratequeue import enqueue_many

        enqueue_many(self.function(variant), [[port, ms]] * count, queue=QUEUE, id=tag)

    def counts(self, tag: str) -> tuple[int, int, int]:
        from django_ratequeue.engine.models import Attempt, Job

        job, attempt = (self.connection.ops.quote_name(m._meta.db_table) for m in (Job, Attempt))
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT
                    (SELECT count(*) FROM {job} WHERE id LIKE %s AND status = 'complete'),
                    (SELECT count(*) FROM {attempt} WHERE job_id LIKE %s
                        AND started_at IS NOT NULL AND ended_at IS NULL),
                    (SELECT count(*) FROM {job} WHERE id LIKE %s
                        AND status IN ('failed', 'retrying'))
                """,
                [f"{tag}-%"] * 3,
            )
            done, running, failed = cursor.fetchone()
        return int(done), int(running), int(failed)

    def connections(self) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return int(cursor.fetchone()[0])

    def analyze(self) -> None:
        from django_ratequeue.engine.models import Attempt, Job

        tables = ", ".join(
            self.connection.ops.quote_name(m._meta.db_table) for m in (Job, Attempt)
        )
        with self.connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {tables}")

    def probe(self, variant: str, port: int) -> str:
        if variant == SYNC:
            return ""
        from bench import ratequeue_jobs
        from django_ratequeue import JobFailed, enqueue

        if ratequeue_jobs.ASYNC_REFUSED:
            return f"@job refuses async def functions: {ratequeue_jobs.ASYNC_REFUSED}"
        handle = enqueue(self.function(variant), args=[port, 0], queue=QUEUE, retries=0)
        try:
            handle.result(timeout=60)
        except JobFailed as error:
            return f"this version cannot run async def jobs: the probe job failed: {error.error}"
        return ""

    def stop(self) -> None:
        super().stop()
        empty_tables()


class Procrastinate(Contender):
    name = PROCRASTINATE

    def __init__(self) -> None:
        from bench import procrastinate_app

        self.app = procrastinate_app
        self.monitor: Any = None

    def start(self, concurrency: int) -> None:
        self.app.empty()
        self.workers = Workers([self.app.worker_command(concurrency)], {})
        self.monitor = self.app.Monitor()

    def enqueue(self, variant: str, tag: str, count: int, port: int, ms: int) -> None:
        task = self.app.wait_on_network if variant == SYNC else self.app.await_on_network
        task.configure(queue=tag).batch_defer(*[{"port": port, "ms": ms}] * count)

    def counts(self, tag: str) -> tuple[int, int, int]:
        row = self.monitor.connection.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
            "count(*) FILTER (WHERE status = 'doing'), "
            "count(*) FILTER (WHERE status = 'failed') "
            "FROM procrastinate_jobs WHERE queue_name = %s",
            [tag],
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def connections(self) -> int:
        return int(self.monitor.connections())

    def analyze(self) -> None:
        self.app.analyze()

    def probe(self, variant: str, port: int) -> str:
        return ""

    def stop(self) -> None:
        super().stop()
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
        self.app.empty()


# -- one run ---------------------------------------------------------------------------------


@dataclass
class Run:
    jobs: int
    seconds: float
    enqueue_seconds: float
    running: int  # most running at once, sampled in the database
    server_peak: int  # most requests open at once at the wait server
    connections: int  # most connections held to the contender's database
    idle_rss: dict[int, int] = field(default_factory=dict)  # KiB by pid, before the run
    peak_rss: dict[int, int] = field(default_factory=dict)  # KiB by pid, the most seen

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    def memory(self) -> str:
        sizes = sorted(self.peak_rss.values())
        if not sizes:
            return "RSS: ?"
        grown = sum(self.peak_rss.values()) - sum(self.idle_rss.values())
        per_job = f", {grown / max(self.running, 1) / 1024:.2f} MiB more per running job" * (
            self.running > 1
        )
        return (
            f"{len(sizes)} processes, RSS {sizes[0] / 1024:.0f} to {sizes[-1] / 1024:.0f} MiB "
            f"each, {sum(sizes) / 1024:.0f} MiB in all ({grown / 1024:+.0f} MiB while "
            f"running{per_job})"
        )

    def __str__(self) -> str:
        return (
            f"{self.jobs:,} jobs in {self.seconds:.2f} s: {self.per_second:,.0f}/s "
            f"(enqueue {self.enqueue_seconds * 1000:.0f} ms); most running at once "
            f"{self.running} (server: {self.server_peak} requests open); "
            f"{self.connections} database connections; {self.memory()}"
        )


def measure(
    contender: Contender, server: Server, variant: str, tag: str, count: int, ms: int
) -> Run:
    """Enqueue ``count`` jobs and wait for the last to finish, sampling as they run."""
    timeout = 60 + count * ms / 1000  # one at a time would take count x ms
    leaders = [process.pid for process in contender.workers.processes]
    server.stats(reset=True)
    idle = memory(leaders)
    peak = dict(idle)
    most_running = most_connections = 0
    began = time.perf_counter()
    contender.enqueue(variant, tag, count, server.port, ms)
    enqueued = time.perf_counter() - began
    samples = 0
    while True:
        done, running, failed = contender.counts(tag)
        most_running = max(most_running, running)
        if done >= count:
            break
        elapsed = time.perf_counter() - began
        if elapsed > timeout:
            raise RuntimeError(
                f"timed out: {done} of {count} done, {running} running, {failed} failed or "
                f"retrying after {timeout:.0f} s"
            )
        if samples % 10 == 0:
            contender.workers.check_alive()
            most_connections = max(most_connections, contender.connections())
            for pid, size in memory(leaders).items():
                peak[pid] = max(peak.get(pid, 0), size)
        samples += 1
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    return Run(
        count,
        seconds,
        enqueued,
        most_running,
        server.stats()["peak"],
        most_connections,
        idle,
        peak,
    )


@dataclass
class Outcome:
    """A contender's repeated runs of one scenario and variant, or why there are none."""

    runs: list[Run] = field(default_factory=list)
    skipped: str = ""

    @property
    def median(self) -> Run | None:
        if not self.runs:
            return None
        ordered = sorted(self.runs, key=lambda run: run.seconds)
        return ordered[(len(ordered) - 1) // 2]

    def rate(self) -> float:
        return statistics.median(run.per_second for run in self.runs) if self.runs else 0.0

    def seconds(self) -> float:
        return statistics.median(run.seconds for run in self.runs) if self.runs else 0.0


def scenario(
    contender: Contender,
    server: Server,
    variant: str,
    name: str,
    count: int,
    ms: int,
    concurrency: int,
    repeats: int,
) -> Outcome:
    """``repeats`` runs on one cluster, each ANALYZEd after; skipped when the probe says so.

    "Running" in the database is an attempt started and not ended (ours) or a job
    ``doing`` (procrastinate); the wait server's count of open requests is what ran."""
    print(f"- {name}, {contender.name}, {variant} jobs ({count:,} x {ms} ms) ...", flush=True)
    contender.start(concurrency)
    try:
        contender.warm(SYNC, server.port)
        why = contender.probe(variant, server.port)
        if why:
            print(f"  skipped: {why}", flush=True)
            return Outcome(skipped=why)
        outcome = Outcome()
        for repeat in range(repeats):
            run = measure(contender, server, variant, f"{name}-{repeat}", count, ms)
            contender.analyze()
            print(f"  {run}", flush=True)
            outcome.runs.append(run)
        return outcome
    except KeyboardInterrupt:
        raise
    except Exception as error:
        print(f"  failed: {error}", file=sys.stderr, flush=True)
        return Outcome(skipped=f"error: {str(error).splitlines()[0][:80]}")
    finally:
        contender.stop()


# -- the report --------------------------------------------------------------------------------


def settings_for(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Ours' settings as a user wanting ``--concurrency`` at once writes them, and a note
    on ``--slots``."""
    from django_ratequeue.conf import DEFAULTS

    concurrency = args.concurrency
    ratequeue: dict[str, Any] = {
        "MAX_CONCURRENCY": concurrency,
        "MAX_QUEUE_CONCURRENCY": max(DEFAULTS["MAX_QUEUE_CONCURRENCY"], concurrency),
        "QUEUES": {QUEUE: {"max_concurrency": concurrency}},
    }
    if "SLOTS" not in DEFAULTS:
        note = "SLOTS: this version has no such setting (one job per worker process)"
        if args.slots is not None:
            note += f"; --slots {args.slots} ignored"
    elif args.slots is None:
        note = f"SLOTS: the default ({DEFAULTS['SLOTS']})"
    else:
        ratequeue["SLOTS"] = args.slots
        note = f"SLOTS: {args.slots}"
    return ratequeue, note


def summary(name: str, ours: Outcome, peer: Outcome, wide: bool) -> str:
    def describe(outcome: Outcome) -> str:
        if not outcome.runs:
            return f"skipped ({outcome.skipped})"
        median = outcome.median
        assert median is not None
        each = ", ".join(f"{run.seconds:.2f} s" for run in outcome.runs)
        if wide:
            return (
                f"{outcome.seconds():.2f} s, at most {max(r.running for r in outcome.runs)} at "
                f"once in the database, {max(r.server_peak for r in outcome.runs)} at the "
                f"server (median of {len(outcome.runs)}: {each})"
            )
        rates = ", ".join(f"{run.per_second:,.0f}" for run in outcome.runs)
        return (
            f"{outcome.rate():,.0f}/s (median of {len(outcome.runs)}: {rates}); "
            f"{median.connections} connections, {median.memory()}"
        )

    line = f"{name}: ours {describe(ours)}; procrastinate {describe(peer)}"
    if ours.runs and peer.runs:
        if wide:
            line += f"; ours {peer.seconds() / ours.seconds():.2f}x procrastinate's speed"
        else:
            line += f"; ours {ours.rate() / peer.rate():.2f}x procrastinate"
    return line


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.io",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=2000, help="jobs of the io scenario")
    parser.add_argument("--wait-ms", type=int, default=100, help="each io job's wait")
    parser.add_argument(
        "--concurrency", type=int, default=200, help="the queue's limit (and procrastinate's)"
    )
    parser.add_argument("--wide-jobs", type=int, default=40, help="jobs of io-wide")
    parser.add_argument("--wide-wait-ms", type=int, default=1000, help="each io-wide job's wait")
    parser.add_argument(
        "--slots", type=int, default=None, help='RATEQUEUE["SLOTS"] (default: the library\'s)'
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (medians)")
    parser.add_argument(
        "--only", choices=["io", "io-wide"], default=None, help="one scenario alone"
    )
    parser.add_argument(
        "--variant", choices=["sync", "async"], default=None, help="one kind of job alone"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.wide_jobs, args.wide_wait_ms, args.repeats = 200, 10, 300, 1
    counts = (args.jobs, args.wait_ms, args.concurrency, args.wide_jobs, args.repeats)
    if min(counts) < 1 or args.wide_wait_ms < 1:
        parser.error("every count must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE)
    os.environ.setdefault("BENCH_PROCRASTINATE_DSN", DEFAULT_PROCRASTINATE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    ratequeue, slots_note = settings_for(args)
    os.environ["BENCH_RATEQUEUE"] = json.dumps(ratequeue)  # here and in the cluster
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    from django.conf import settings

    database = prepare_database()
    peer_ready = find_spec("procrastinate") is not None
    if peer_ready:
        from bench import procrastinate_app

        peer_line = (
            f"procrastinate {version('procrastinate')}: one worker process, concurrency "
            f"{args.concurrency}, database {procrastinate_app.prepare()} on the same server; "
            f"its sync tasks run in the event loop's default thread pool "
            f"(min(32, cores + 4) = {min(32, (os.cpu_count() or 1) + 4)} threads)"
        )
    else:
        peer_line = "procrastinate: not installed (pip install -e '.[bench]')"
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        autovacuum = cursor.fetchone()[0]
    command = " ".join(["python -m bench.io", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"Python {platform.python_version()}, Django {version('django')}, "
                f"django-q2 {version('django-q2')}, psycopg {version('psycopg')}",
                f"ours: Q_CLUSTER workers {settings.Q_CLUSTER['workers']}; RATEQUEUE "
                f"{json.dumps(ratequeue)}; {slots_note}",
                peer_line,
                f"autovacuum: {autovacuum}; the tables are ANALYZEd after each run",
                f"command: {command}",
            ]
        ),
        flush=True,
    )
    variants = (
        [SYNC, ASYNC] if args.variant is None else [SYNC if args.variant == "sync" else ASYNC]
    )
    scenarios = [
        ("io", args.jobs, args.wait_ms, False),
        ("io-wide", args.wide_jobs, args.wide_wait_ms, True),
    ]
    if args.only is not None:
        scenarios = [s for s in scenarios if s[0] == args.only]
    started = time.monotonic()
    server = Server()
    lines = []
    try:
        for name, count, ms, wide in scenarios:
            for variant in variants:
                ours = scenario(
                    Ours(), server, variant, name, count, ms, args.concurrency, args.repeats
                )
                peer = (
                    scenario(
                        Procrastinate(),
                        server,
                        variant,
                        name,
                        count,
                        ms,
                        args.concurrency,
                        args.repeats,
                    )
                    if peer_ready
                    else Outcome(skipped="not installed")
                )
                lines.append(
                    summary(f"{name}, {variant} jobs, {count:,} x {ms} ms", ours, peer, wide)
                )
    finally:
        server.stop()
        if peer_ready:
            from bench import procrastinate_app

            procrastinate_app.drop()
    print()
    print(f"Summary (load average now {', '.join(f'{v:.2f}' for v in os.getloadavg())}):")
    for line in lines:
        print(f"- {line}")
    print(
        f"Rates count from the first enqueue to the last finished job. Run took "
        f"{time.monotonic() - started:.0f} s."
    )


if __name__ == "__main__":
    main()

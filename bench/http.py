"""The HTTP API: enqueues over HTTP, and what streaming output costs a job.

    .venv/bin/python -m bench.http              # about three minutes
    .venv/bin/python -m bench.http --quick      # smoke run
    .venv/bin/python -m bench.http --only sse --sse-seconds 60

HTTP enqueue: one server process and N client processes (4) that POST ``jobs/`` one
request after the other on a kept-alive connection, authenticated by a DRF token, after a
common start. The server: gunicorn (WSGI, one process, the gthread worker with
``BENCH_THREADS`` threads, 1 by default; persistent connections), then uvicorn (ASGI, one
process, the database's connections pooled), each that is installed; ``--server`` picks
one (``runserver``: Django's threaded development server). With each, the floor: the same
requests to a DRF view that does nothing (``bench/floor/``); none of the queue benchmark's
peers (django-q2, django-tasks-db) has an HTTP API, so the floor is the comparison. The
server's CPU time per request is measured (``/proc``, its process group). No cluster
runs: this is the cost of the request, the enqueue being ``bench.queue``'s.

Streaming: the same job run here (``run_attempt``, as a worker runs it) producing
10,000 tokens, streaming each with ``stream_output`` or not; once with a pause per token
(the wait on a model's provider), once with none (the bare cost of a call). The rows its
output was written in are counted: at most one write per PROGRESS_INTERVAL is the target.

Event streams under load: one uvicorn server process, N (200) clients each following one
running job's Server-Sent Events for a duration (60 s), from one asyncio client process. A
few of the jobs (``--sse-live``) stream output all along: every PROGRESS_INTERVAL a chunk
of each is written by the progress writer's own ``store`` (one transaction per job, with
its signal), as a worker writes it; the time from each chunk's commit to its arrival at
the client is its delivery latency. The others wait in silence (heartbeats only).
Sampled every second: the server's resident memory, and the database connections open on
the benchmark's database (a waiting stream must hold none). Errors: a refused or broken
stream, a stream that ended early, a chunk that never arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import importlib.util
import json
import math
import multiprocessing
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import machine_lines, prepare_database, version
from bench.harness import process_stats

ROOT = Path(__file__).resolve().parents[1]
ENQUEUE = "/ratequeue/jobs/"
# The same body answered by a DRF view that does nothing (bench.urls): the floor.
FLOOR = "/bench/floor/"
BODY = json.dumps({"function": "bench.jobs.noop"}).encode()
# Requests each client sends before the common start.
WARM_UP = 20


# -- the server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_command(kind: str, port: int) -> tuple[list[str], dict[str, str], str]:
    """The command line, its environment, and a description of the server."""
    if kind == "uvicorn":
        command = [sys.executable, "-m", "uvicorn", "bench.asgi:application"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        command += ["--no-access-log", "--log-level", "warning"]
        label = (
            f"uvicorn {version('uvicorn')} (ASGI, 1 process; httptools {version('httptools')}, "
            f"uvloop {version('uvloop')}), psycopg_pool connections"
        )
        return command, {"BENCH_DB_POOL": "1"}, label
    if kind == "gunicorn":
        threads = os.environ.get("BENCH_THREADS", "1")
        command = [sys.executable, "-m", "gunicorn", "bench.wsgi:application"]
        command += ["--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", threads]
        command += ["--worker-class", "gthread", "--log-level", "warning"]
        # Kept-alive connections stay open while a client waits for the common start.
        command += ["--keep-alive", "300"]
        label = f"gunicorn {version('gunicorn')} (WSGI, 1 process, gthread, {threads} threads)"
        return command, {}, label
    command = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    return command, {}, f"Django {version('django')} runserver (WSGI, threaded, 1 process)"


SERVERS = ("gunicorn", "uvicorn", "runserver")


def installed(kind: str) -> bool:
    """Whether the server ``kind`` can run here (Django's own always can)."""
    return kind == "runserver" or importlib.util.find_spec(kind) is not None


@contextmanager
def server(kind: str) -> Iterator[tuple[int, str, int]]:
    """A server process in its own process group, killed on exit; yields its port, its
    description and its process id."""
    port = free_port()
    command, env, label = server_command(kind, port)
    log = Path(tempfile.mkstemp(prefix="bench-http-", suffix=".log")[1])
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_answering(port, process, log)
        yield port, label, process.pid
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        log.unlink(missing_ok=True)


def wait_until_answering(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait up to 30 s for the server on ``port`` to answer; raise with its log if it does not."""
    deadline = time.monotonic() + 30
    while not answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


def answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/ratequeue/schema/")  # 403 without a login: it answers
        return connection.getresponse().status in (200, 401, 403)
    except OSError:
        return False


# -- the clients -------------------------------------------------------------------------


def client(port: int, url: str, token: str, count: int, start: Any, results: Any) -> None:
    """One client process: warm up, wait for the common start, then POST ``count`` enqueues
    (to ``url``) one after the other; reports its start, end, latencies and answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def post() -> int:
        connection.request("POST", url, BODY, headers)
        response = connection.getresponse()
        response.read()
        return response.status

    for _ in range(WARM_UP):
        post()
    start.wait()
    began = time.time()
    latencies, statuses = [], []
    for _ in range(count):
        sent = time.perf_counter()
        statuses.append(post())
        latencies.append(time.perf_counter() - sent)
    results.put((began, time.time(), latencies, statuses))


def group_cpu_seconds(group: int) -> float:
    """CPU time (user and system) of the processes in process group ``group`` so far: the
    server's, its workers included."""
    total = sum(
        int(fields[11]) + int(fields[12])  # utime, stime
        for _pid, fields in process_stats()
        if int(fields[2]) == group  # the process group
    )
    return total / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class HttpRate:
    requests: int
    seconds: float
    latencies: list[float]
    refused: int
    served: int  # the requests and the warm-ups
    server_cpu: float  # seconds, over the requests and the clients' warm-ups

    def __str__(self) -> str:
        ordered = sorted(self.latencies)
        p50 = ordered[len(ordered) // 2] * 1000
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000
        cpu = self.server_cpu / self.served * 1000
        text = (
            f"{self.requests / self.seconds:,.0f} jobs/s (p50 {p50:.1f} ms, p99 {p99:.1f} ms; "
            f"server CPU {cpu:.2f} ms a request)"
        )
        return text + (f", {self.refused} not 201" if self.refused else "")


def http_enqueues(
    port: int, pid: int, url: str, token: str, clients: int, per_client: int
) -> HttpRate:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(clients)
    results = context.Queue()
    processes = [
        context.Process(target=client, args=(port, url, token, per_client, start, results))
        for _ in range(clients)
    ]
    cpu_before = group_cpu_seconds(pid)
    for process in processes:
        process.start()
    reports = [results.get(timeout=300) for _ in processes]
    server_cpu = group_cpu_seconds(pid) - cpu_before
    for process in processes:
        process.join()
    began = min(report[0] for report in reports)
    ended = max(report[1] for report in reports)
    latencies = [latency for report in reports for latency in report[2]]
    refused = sum(status != 201 for report in reports for status in report[3])
    served = clients * (per_client + WARM_UP)
    return HttpRate(clients * per_client, ended - began, latencies, refused, served, server_cpu)


def bench_token() -> str:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user, _ = User.objects.get_or_create(username="bench-http")
    token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)


def empty_tables() -> None:
    from django.db import connection

    from django_ratequeue.models import (
        Attempt,
        CancelRequest,
        Job,
        LoopState,
        OutputChunk,
        RollupCursor,
        RuntimeLimits,
        TurnState,
    )

    models = [OutputChunk, Attempt, Job, CancelRequest, LoopState]
    models += [TurnState, RuntimeLimits, RollupCursor]
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables}")


# -- streaming ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Streamed:
    """One run of the job: its time, and the rows its output was written in (each write
    of output is one row, or more when it holds over MAX_OUTPUT_CHUNK_LENGTH)."""

    seconds: float
    rows: int


def run_job(chunks: int, pause: float, stream: bool) -> Streamed:
    """Run ``generate`` once here, as a worker runs an attempt."""
    from django.utils import timezone

    from django_ratequeue import enqueue
    from django_ratequeue.engine.execution import run_attempt
    from django_ratequeue.models import Attempt, OutputChunk

    handle = enqueue("bench.ratequeue_jobs.generate", args=[chunks, pause, stream])
    Attempt.objects.create(
        job_id=handle.id, number=1, queue="default", dispatched_at=timezone.now()
    )
    attempt = Attempt.objects.select_related("job").get(job_id=handle.id)
    began = time.perf_counter()
    run_attempt(attempt)
    seconds = time.perf_counter() - began
    assert attempt.outcome == "succeeded", attempt.error
    return Streamed(seconds, OutputChunk.objects.filter(job_id=handle.id).count())


def streaming_cost(chunks: int, pause: float, repeats: int) -> str:
    """Median time with streaming against without, over ``repeats`` alternating runs."""
    plain, streamed = [], []
    for _ in range(repeats):
        plain.append(run_job(chunks, pause, stream=False))
        streamed.append(run_job(chunks, pause, stream=True))
    from django_ratequeue.conf import ratequeue_settings

    interval = ratequeue_settings().PROGRESS_INTERVAL
    without = statistics.median(run.seconds for run in plain)
    with_ = statistics.median(run.seconds for run in streamed)
    # One write at the first chunk, at most one per interval after it, and the last one.
    worst = max(streamed, key=lambda run: run.rows - run.seconds / interval)
    bound = math.floor(worst.seconds / interval) + 2
    return (
        f"{with_:.3f} s streaming, {without:.3f} s not: {with_ / without:.3f}x; "
        f"{worst.rows} rows for {chunks:,} chunks in {worst.seconds:.2f} s (one write per "
        f"{interval * 1000:.0f} ms allows {bound})"
    )


# -- event streams under load --------------------------------------------------------------


def running_jobs(token: str, count: int) -> list[str]:
    """``count`` jobs of the token's user, shown as running (no cluster runs them)."""
    from rest_framework.authtoken.models import Token

    from django_ratequeue import enqueue_many
    from django_ratequeue.engine.models import Status
    from django_ratequeue.models import Job

    user = Token.objects.get(key=token).user
    handles = enqueue_many("bench.jobs.noop", [() for _ in range(count)], owner=user)
    ids = [handle.id for handle in handles]
    Job.objects.filter(pk__in=ids).update(status=Status.RUNNING, attempts=1)
    return ids


async def follow(
    port: int,
    token: str,
    job_id: str,
    seconds: float,
    received: list[Any],
    errors: list[str],
    answered: asyncio.Semaphore,
) -> None:
    """Read one job's event stream for ``seconds``, noting when each output chunk arrives
    (``(job_id, index, time)`` in ``received``); ``answered`` is released once the server
    answered, 200 or not."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as error:
        errors.append(f"{job_id}: could not connect: {error}")
        answered.release()
        return
    released = False
    try:
        writer.write(
            f"GET /ratequeue/jobs/{job_id}/events/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Token {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        status = (await reader.readline()).split(b" ")[1]
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # the headers: uvicorn sends the stream chunked
        answered.release()
        released = True
        if status != b"200":
            errors.append(f"{job_id}: answered {status.decode()}")
            return
        buffer = b""
        async with asyncio.timeout(seconds):
            while True:
                size = int(await reader.readline(), 16)
                if size == 0:
                    errors.append(f"{job_id}: the stream ended early")
                    return
                buffer += await reader.readexactly(size + 2)
                buffer = buffer[:-2]
                *blocks, buffer = buffer.split(b"\n\n")
                now = time.time()
                for block in blocks:
                    if block.startswith(b"event: output\n"):
                        data = json.loads(block.rsplit(b"data: ", 1)[1])
                        received.append((job_id, data["index"], now))
    except TimeoutError:
        pass  # the stream lasted as long as the run
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as error:
        errors.append(f"{job_id}: {type(error).__name__}: {error}")
    finally:
        if not released:
            answered.release()
        writer.close()


def sse_clients(
    port: int, token: str, job_ids: list[str], seconds: float, opened: Any, results: Any
) -> None:
    """The client process: follows every job's stream at once for ``seconds``; sets
    ``opened`` once the server answered each."""

    async def run() -> tuple[list[Any], list[str]]:
        received: list[Any] = []
        errors: list[str] = []
        answered = asyncio.Semaphore(0)
        tasks = [
            asyncio.ensure_future(follow(port, token, job_id, seconds, received, errors, answered))
            for job_id in job_ids
        ]
        async with asyncio.timeout(60):
            for _ in job_ids:
                await answered.acquire()
        opened.set()
        await asyncio.gather(*tasks)
        return received, errors

    results.put(asyncio.run(run()))


def resident_memory(pid: int) -> int:
    """The process's resident memory, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def database_connections() -> int:
    """Sessions open on this database, the benchmark's own one apart."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@dataclass(frozen=True)
class SseLoad:
    streams: int
    seconds: float
    errors: list[str]
    rss_before: int
    rss_peak: int
    connections_peak: int
    pool_size: int
    chunks: int
    lost: int
    latencies: list[float]

    def resources(self) -> str:
        errors = f"{len(self.errors)} errors"
        if self.errors:
            errors += f" (the first: {self.errors[0]})"
        return (
            f"{errors}; server memory {self.rss_before / 2**20:.0f} MiB before, "
            f"{self.rss_peak / 2**20:.0f} MiB at most; database connections at most "
            f"{self.connections_peak} (the server's pool holds up to {self.pool_size})"
        )

    def delivery(self) -> str:
        if not self.latencies:
            return f"no chunk received ({self.lost} lost)"
        ordered = sorted(self.latencies)
        p50 = ordered[len(ordered) // 2] * 1000
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000
        lost = f", {self.lost} never arrived" if self.lost else ""
        return f"p50 {p50:.0f} ms, p99 {p99:.0f} ms{lost}"


def sse_load(port: int, pid: int, token: str, streams: int, live: int, seconds: float) -> SseLoad:
    """``streams`` clients follow running jobs for ``seconds``; ``live`` of the jobs get
    a chunk of output every PROGRESS_INTERVAL, each written as a worker's progress writer
    writes it (its transaction, its signal to the streams' watchers)."""
    from django.conf import settings

    from django_ratequeue.engine.progress import UNSET, store

    interval = settings.RATEQUEUE.get("PROGRESS_INTERVAL", 0.05)
    job_ids = running_jobs(token, streams)
    rss_before = resident_memory(pid)
    context = multiprocessing.get_context("spawn")
    opened, results = context.Event(), context.Queue()
    clients = context.Process(
        target=sse_clients, args=(port, token, job_ids, seconds, opened, results)
    )
    clients.start()
    opened.wait(60)
    written: dict[tuple[str, int], float] = {}
    rss_peak, connections_peak = rss_before, 0
    began = time.monotonic()
    next_sample = began + 1
    index = 0
    # Writes stop a while before the clients do: what is written has time to arrive.
    while (now := time.monotonic()) < began + seconds - min(5.0, seconds / 4):
        if now >= next_sample:
            rss_peak = max(rss_peak, resident_memory(pid))
            connections_peak = max(connections_peak, database_connections())
            next_sample += 1
        index += 1
        for job_id in job_ids[:live]:
            store(job_id, UNSET, index, [f"token {index} "])
            written[job_id, index] = time.time()
        time.sleep(max(0.0, began + index * interval - time.monotonic()))
    received, errors = results.get(timeout=seconds + 120)
    clients.join()
    arrivals = {(job_id, number): at for job_id, number, at in received}
    latencies = [arrivals[key] - at for key, at in written.items() if key in arrivals]
    return SseLoad(
        streams=streams,
        seconds=seconds,
        errors=errors,
        rss_before=rss_before,
        rss_peak=rss_peak,
        connections_peak=connections_peak,
        pool_size=settings.DB_POOL["max_size"],
        chunks=len(written),
        lost=len(written) - len(latencies),
        latencies=latencies,
    )


# -- the report --------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.http",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--server",
        choices=SERVERS,
        help="the server of the enqueue scenario (default: each of gunicorn and uvicorn "
        "that is installed)",
    )
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--requests", type=int, default=1000, help="enqueues per client")
    parser.add_argument("--chunks", type=int, default=10_000, help="tokens the job streams")
    parser.add_argument(
        "--pause", type=float, default=0.0001, help="seconds per token in the paced run"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each streaming job")
    parser.add_argument("--sse-streams", type=int, default=200, help="event streams at once")
    parser.add_argument(
        "--sse-live", type=int, default=20, help="of which streaming output all along"
    )
    parser.add_argument("--sse-seconds", type=float, default=60.0, help="how long they last")
    parser.add_argument("--only", choices=["enqueue", "sse", "streaming"], help="one scenario")
    parser.add_argument("--quick", action="store_true", help="smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.chunks, args.repeats, args.sse_seconds = 200, 2000, 1, 10.0
    if min(args.clients, args.requests, args.chunks, args.repeats, args.sse_streams) < 1:
        parser.error("every count must be positive")
    if not 0 <= args.sse_live <= args.sse_streams:
        parser.error("--sse-live must be between 0 and --sse-streams")
    if not 0 < args.sse_seconds <= 3600:
        parser.error("--sse-seconds must be more than 0 and at most 3600")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.conf import settings

    database = prepare_database()
    command = " ".join(["python -m bench.http", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"Python {platform.python_version()}, Django {version('django')}, "
                f"djangorestframework {version('djangorestframework')}, "
                f"psycopg {version('psycopg')}",
                f"PROGRESS_INTERVAL: {settings.RATEQUEUE.get('PROGRESS_INTERVAL', 0.05)} s",
                f"command: {command}",
            ]
        ),
        flush=True,
    )
    rows: list[tuple[str, str, str]] = []
    try:
        empty_tables()
        token = bench_token()
        servers = [args.server] if args.server else [k for k in SERVERS[:2] if installed(k)]
        for kind in servers if args.only in (None, "enqueue") else ():
            with server(kind) as (port, label, pid):
                print(f"server: {label}", flush=True)
                for url, scenario, target in (
                    (ENQUEUE, "HTTP enqueue", "≥ 500 jobs/s"),
                    (FLOOR, "the floor: a DRF view doing nothing, same body and auth", "—"),
                ):
                    rate = http_enqueues(port, pid, url, token, args.clients, args.requests)
                    rows.append(
                        (
                            f"{scenario}, {args.clients} client processes x "
                            f"{args.requests:,}, one server process ({label})",
                            target,
                            str(rate),
                        )
                    )
                    print(f"- {rows[-1][2]}", flush=True)
            empty_tables()
        if args.only in (None, "sse"):
            with server("uvicorn") as (port, label, pid):
                print(f"server: {label}", flush=True)
                load = sse_load(
                    port, pid, token, args.sse_streams, args.sse_live, args.sse_seconds
                )
            rows.append(
                (
                    f"{args.sse_streams} event streams for {args.sse_seconds:g} s on one server "
                    f"process ({label}), {args.sse_live} of them streaming output",
                    "no errors; no connection per waiting stream",
                    load.resources(),
                )
            )
            rows.append(
                (
                    f"SSE delivery, output chunk committed → received by a client "
                    f"({load.chunks:,} chunks, {args.sse_live} streams, under the load above)",
                    "p50 ≤ 50 ms",
                    load.delivery(),
                )
            )
            print(f"- {rows[-2][2]}\n- {rows[-1][2]}", flush=True)
            empty_tables()
        for pause in (args.pause, 0.0) if args.only in (None, "streaming") else ():
            paced = f"{pause * 1e6:.0f} µs per token" if pause else "no pause"
            rows.append(
                (
                    f"a job streaming {args.chunks:,} chunks against the same job not "
                    f"streaming ({paced}, median of {args.repeats})",
                    "≤ 1.2x; ≤ 1 write per 50 ms" if pause else "—",
                    streaming_cost(args.chunks, pause, args.repeats),
                )
            )
            print(f"- {rows[-1][2]}", flush=True)
    finally:
        empty_tables()
    print()
    print("| scenario | target | measured |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

"""Remote workers: jobs/s end to end, claim → start latency, a heartbeat's database writes.

    .venv/bin/python -m bench.remote            # about a minute
    .venv/bin/python -m bench.remote --quick    # smoke run

One server process (uvicorn, ASGI, 1 process, the database's connections pooled: bench.http's
server), one ``qcluster`` (the loop that makes remote work claimable; its runners take none
of it) and N remote worker processes (4; ``python -m django_ratequeue.worker`` with this
module's handlers, standard library only; 25 slots each by default, the 100 a queue may
run at most), on the benchmark's PostgreSQL database.

- End to end: ``--jobs`` no-op jobs enqueued in one call before the workers start, timed
  from the first finished job to the last (as ``bench.queue``'s end to end).
- Claim → start: ``--samples`` jobs one after the other, each enqueued while the workers
  wait in their claims; the time from the moment the loop made the attempt claimable
  (its ``dispatched_at``) to its handler's first line on the worker (the same clock).
- Heartbeat: the heartbeat view called in this process on a claimed attempt, its SQL
  statements captured (``CaptureQueriesContext``): the writes (INSERT/UPDATE/DELETE) and
  reads of each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import machine_lines, prepare_database, version
from bench.harness import Workers, empty_tables, terminate
from bench.queue import OURS, time_jobs, workers
from django_ratequeue.worker import handler

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "remote"
KEY_NAME = "bench.remote"
NOOP = "bench.jobs.noop"
PROBE = "bench.jobs.record_start"
# Where the worker processes' probe handler writes "<seq> <time>" lines.
STARTS_ENV = "BENCH_REMOTE_STARTS"
# Its own database unless DATABASE_URL names one: other benchmarks may run meanwhile.
DATABASE_URL = "postgres://root@127.0.0.1:5432/rq_remote_bench"


# -- the handlers the worker processes run (standard library only) -----------------------


@handler(NOOP)
def noop() -> None:
    """Nothing: only the cost of the queue and the protocol shows."""


@handler(PROBE)
def record_start(seq: int) -> None:
    """The latency probe: the moment the handler began, appended to a file."""
    started = time.time()
    fd = os.open(os.environ[STARTS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{seq} {started:.6f}\n".encode())
    finally:
        os.close(fd)


# -- processes ---------------------------------------------------------------------------


def remote_settings(concurrency: int) -> dict[str, Any]:
    """The RATEQUEUE overrides every process of the run shares: one remote queue with room
    for every worker slot (a queue's limit is at most 100)."""
    return {
        "MAX_CONCURRENCY": concurrency,
        "QUEUES": {QUEUE: {"max_concurrency": min(concurrency, 100), "remote": True}},
    }


def worker_processes(url: str, key: str, count: int, concurrency: int, starts: Path) -> Workers:
    """``count`` remote worker processes, without Django settings, as on a remote host
    (``bench.queue``'s processes, with another command: killed with their group)."""

    class RemoteWorkers(Workers):
        def __init__(self) -> None:
            self.log = Path(tempfile.mkstemp(prefix="bench-remote-", suffix=".log")[1])
            self.started_at = time.monotonic()
            command = [sys.executable, "-m", "django_ratequeue.worker", "--url", url]
            command += ["--key", key, "--handlers", "bench.remote"]
            command += ["--concurrency", str(concurrency)]
            env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), STARTS_ENV: str(starts)}
            with self.log.open("ab") as out:
                self.processes = [
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                    for _ in range(count)
                ]

    return RemoteWorkers()


@contextmanager
def cluster() -> Iterator[Workers]:
    """A ``qcluster``: its loop leader dispatches the remote queue's attempts."""
    with workers(OURS) as running:
        yield running


# -- measurements ------------------------------------------------------------------------


@contextmanager
def serving() -> Iterator[str]:
    """A fresh server per scenario: a claim still waiting in the last one's server for a
    worker that was killed would take the next scenario's first attempts."""
    from bench.http import server

    with server("uvicorn") as (port, _label, _pid):
        yield f"http://127.0.0.1:{port}/ratequeue/"


def end_to_end(key: str, args: argparse.Namespace) -> str:
    from django_ratequeue import enqueue_many
    from django_ratequeue.engine.models import Job, Status

    empty_tables()
    enqueue_many(NOOP, [() for _ in range(args.jobs)], queue=QUEUE)
    done = Job.objects.filter(status=Status.COMPLETE).count
    with tempfile.TemporaryDirectory() as scratch, serving() as url, cluster():
        running = worker_processes(
            url, key, args.workers, args.concurrency, Path(scratch) / "starts"
        )
        try:
            rate, startup = time_jobs(done, args.jobs, running, 60 + args.jobs / 20)
        finally:
            running.kill()
    return f"{rate} (workers' start-up to the first finished job {startup:.1f} s)"


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def claim_to_start(key: str, args: argparse.Namespace) -> str:
    """Sequential probes while every worker waits in its claim (see the module)."""
    from django_ratequeue import enqueue
    from django_ratequeue.engine.models import Attempt

    empty_tables()
    with tempfile.TemporaryDirectory() as scratch, serving() as url, cluster():
        starts = Path(scratch) / "starts"
        running = worker_processes(url, key, args.workers, args.concurrency, starts)
        try:
            enqueued: dict[int, float] = {}
            for seq in range(-5, args.samples):  # the first five warm up
                time.sleep(0.05)  # let the workers' next claims arrive and wait
                enqueued[seq] = time.time()
                enqueue(PROBE, args=[seq], queue=QUEUE)
                deadline = time.monotonic() + 30
                while f"\n{seq} " not in "\n" + (starts.read_text() if starts.exists() else ""):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"probe {seq} never started")
                    running.check_alive()
                    time.sleep(0.001)
            began = {int(seq): float(at) for seq, at in (line.split() for line in starts.open())}
        finally:
            running.kill()
    dispatched = {
        attempt.job.args[0]: attempt.dispatched_at.timestamp()
        for attempt in Attempt.objects.select_related("job").filter(job__func=PROBE)
    }
    claim = [(began[seq] - dispatched[seq]) * 1000 for seq in range(args.samples)]
    whole = [(began[seq] - enqueued[seq]) * 1000 for seq in range(args.samples)]
    return (
        f"claimable → handler start p50 {percentile(claim, 50):.1f} ms, "
        f"p99 {percentile(claim, 99):.1f} ms; enqueue → handler start p50 "
        f"{percentile(whole, 50):.1f} ms, p99 {percentile(whole, 99):.1f} ms"
    )


def heartbeat_statements(key: str, beats: int) -> str:
    """Heartbeats through the view in this process, their statements counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from django_ratequeue import enqueue
    from django_ratequeue.engine.models import Attempt

    empty_tables()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    with cluster():
        enqueue(NOOP, queue=QUEUE)
        deadline = time.monotonic() + 60
        while not Attempt.objects.filter(remote=True).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the loop never dispatched the probe")
            time.sleep(0.01)
        answer = client.post(
            "/ratequeue/workers/claim/", {"worker": "bench", "max": 1}, format="json"
        )
        [claimed] = answer.json()["attempts"]
        writes, reads = [], []
        for _ in range(beats):
            with CaptureQueriesContext(connection) as captured:
                response = client.post(
                    f"/ratequeue/workers/attempts/{claimed['id']}/heartbeat/", {}, format="json"
                )
            assert response.status_code == 200, response.content
            sql = [query["sql"].lstrip().split(None, 1)[0].upper() for query in captured]
            writes.append(sum(verb in ("INSERT", "UPDATE", "DELETE") for verb in sql))
            reads.append(sum(verb == "SELECT" for verb in sql))
        client.post(f"/ratequeue/workers/attempts/{claimed['id']}/complete/", {}, format="json")
    return (
        f"{max(writes)} write(s) at most, {statistics.mean(writes):.2f} on average; "
        f"{statistics.mean(reads):.1f} reads ({beats} heartbeats)"
    )


# -- the report --------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.remote",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=5000, help="no-op jobs end to end")
    parser.add_argument("--workers", type=int, default=4, help="remote worker processes")
    parser.add_argument("--concurrency", type=int, default=25, help="each worker's slots")
    parser.add_argument("--samples", type=int, default=200, help="claim → start probes")
    parser.add_argument("--beats", type=int, default=50, help="heartbeats counted")
    parser.add_argument("--quick", action="store_true", help="smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.samples, args.beats = 500, 30, 10
    if min(args.jobs, args.workers, args.concurrency, args.samples, args.beats) < 1:
        parser.error("every count must be positive")
    return args


def attempt(what: str, measure: Callable[[], str]) -> str:
    """Run one measurement; a failure is reported and recorded, the run goes on."""
    print(f"- {what} ...", flush=True)
    try:
        result = measure()
    except KeyboardInterrupt:
        raise
    except Exception as error:
        print(f"  failed: {error}", file=sys.stderr)
        return f"error: {str(error).splitlines()[0][:80]}"
    print(f"  {result}", flush=True)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    slots = args.workers * args.concurrency
    # Every process started from here reads these (bench.settings).
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("DATABASE_URL", DATABASE_URL)
    os.environ["BENCH_RATEQUEUE"] = json.dumps(remote_settings(slots))
    os.environ["BENCH_MAX_CONCURRENCY"] = str(slots)
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    from bench.http import server_command
    from django_ratequeue.engine.models import WorkerKey
    from django_ratequeue.engine.workerkeys import create_key

    database = prepare_database()
    command = " ".join(["python -m bench.remote", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"Python {platform.python_version()}, Django {version('django')}, "
                f"psycopg {version('psycopg')}",
                f"server: {server_command('uvicorn', 0)[2]}, a fresh one per scenario",
                f"{args.workers} remote worker processes x {args.concurrency} slots; "
                f"queue {QUEUE!r} max_concurrency {min(slots, 100)}",
                f"command: {command}",
            ]
        ),
        flush=True,
    )
    started = time.monotonic()
    WorkerKey.objects.filter(name=KEY_NAME).delete()  # a former run's
    key = create_key(KEY_NAME, [QUEUE])[1]
    try:
        rows = [
            (
                f"no-op jobs end to end ({args.jobs:,}), {args.workers} workers",
                "≥ 500 jobs/s",
                attempt("end to end", lambda: end_to_end(key, args)),
            ),
            (
                f"claim → start ({args.samples} sequential, idle workers)",
                "p50 ≤ 20 ms",
                attempt("claim → start", lambda: claim_to_start(key, args)),
            ),
            (
                "database writes per heartbeat",
                "≤ 1",
                attempt("heartbeat", lambda: heartbeat_statements(key, args.beats)),
            ),
        ]
    finally:
        empty_tables()
        WorkerKey.objects.filter(name=KEY_NAME).delete()
    print()
    print("| scenario | target | result |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nRun took {time.monotonic() - started:.0f} s.")


if __name__ == "__main__":
    main()

"""A load test of the HTTP API, run as an operator would before going live (issue 36).

    .venv/bin/python -m bench.load --server gunicorn --pollers 20 --bulkers 2 --streamers 50
    .venv/bin/python -m bench.load --server uvicorn --pollers 50 --bulkers 0 --streamers 200
    .venv/bin/python -m bench.load --server gunicorn --pollers 100 --bulkers 2 --streamers 0

The example project's settings (``bench.settings``: PostgreSQL, ``CONN_MAX_AGE`` 0, DEBUG
off) served by gunicorn (``--workers`` x ``--threads``, gthread) or uvicorn (one
process), with a ``qcluster`` of two workers running the jobs, and Locust
(``bench/locustfile.py``, headless, in a process of its own) as the clients, all on this
machine. The users, each with a DRF token of its own: pollers enqueue a job and poll it
until it ends; bulkers enqueue twenty at once; streamers enqueue a talking job (a word
every half second for 30 s, on a queue that runs four at once) and follow its events for
20 s, polling it while a stream is refused (429). It reports per endpoint the requests
per second and the p50/p95/p99 (for a stream: the time to its headers), the answers by
status code, the jobs accepted against completed (after a drain of up to 30 s; the
talking jobs still waiting then are counted apart), the peak of database sessions on the
benchmark's database (server, cluster and this process's sampler together) and the peak
resident memory of the server's processes.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import machine_lines, prepare_database, version
from bench.harness import Workers, group_pids
from bench.http import empty_tables, free_port, resident_memory, wait_until_answering

ROOT = Path(__file__).resolve().parents[1]
DURATION_CAP = 60  # seconds: the machine is shared, runs stay short
TALK_QUEUE = {"talk": {"max_concurrency": 4}}


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=("gunicorn", "uvicorn"), default="gunicorn")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn's processes")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn's threads each")
    parser.add_argument("--pollers", type=int, default=20)
    parser.add_argument("--bulkers", type=int, default=2)
    parser.add_argument("--streamers", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=30, help=f"at most {DURATION_CAP}")
    return parser.parse_args(argv)


def server_command(args: argparse.Namespace, port: int) -> tuple[list[str], str]:
    """Return the server's command line and a description of it."""
    if args.server == "uvicorn":
        command = [sys.executable, "-m", "uvicorn", "example_project.asgi:application"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        command += ["--no-access-log", "--log-level", "warning"]
        return command, f"uvicorn {version('uvicorn')} (ASGI, 1 process)"
    command = [sys.executable, "-m", "gunicorn", "example_project.wsgi:application"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", str(args.workers)]
    command += ["--threads", str(args.threads), "--worker-class", "gthread"]
    command += ["--log-level", "warning", "--timeout", "120"]
    label = f"gunicorn {version('gunicorn')} (WSGI, {args.workers} x {args.threads} gthread)"
    return command, label


@contextmanager
def served(args: argparse.Namespace) -> Iterator[tuple[str, int, str]]:
    """Run the server in its own process group; yield its URL, its pid and its label."""
    port = free_port()
    command, label = server_command(args, port)
    log = Path(tempfile.mkstemp(prefix="bench-load-", suffix=".log")[1])
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until_answering(port, process, log)
        yield f"http://127.0.0.1:{port}", process.pid, label
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=10)
        text = log.read_text(errors="replace")
        errors = [line for line in text.splitlines() if "ERROR" in line]
        first = f", the first: {errors[0]}" if errors else ""
        print(f"server log: {len(errors)} ERROR lines{first}")
        log.unlink(missing_ok=True)


@dataclass
class Peaks:
    """The peaks a sampler thread saw, every half second, while the load ran."""

    connections: int = 0
    memory: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self, server_pid: int) -> None:
        from django.db import connection

        try:
            while not self.stop.wait(0.5):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                    self.connections = max(self.connections, int(cursor.fetchone()[0]))
                memory = 0
                for pid in group_pids([server_pid]):
                    with suppress(OSError, RuntimeError):
                        memory += resident_memory(pid)
                self.memory = max(self.memory, memory)
        finally:
            connection.close()


def make_tokens(count: int) -> list[str]:
    """Return a DRF token for each of ``count`` users (made once, kept)."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    tokens = []
    for number in range(count):
        user, _ = User.objects.get_or_create(username=f"load-{number}")
        tokens.append(str(Token.objects.get_or_create(user=user)[0].key))
    return tokens


def run_locust(args: argparse.Namespace, url: str, tokens: Path, out: Path) -> dict[str, Any]:
    """Run Locust headless against ``url``; return its report (codes, accepted job ids)."""
    users = args.pollers + args.bulkers + args.streamers
    env = {
        **os.environ,
        "LOAD_TOKENS": str(tokens),
        "LOAD_POLLERS": str(args.pollers),
        "LOAD_BULKERS": str(args.bulkers),
        "LOAD_STREAMERS": str(args.streamers),
        "LOAD_REPORT": str(out / "report.json"),
    }
    command = [sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "locustfile.py")]
    command += ["--headless", "-u", str(users), "-r", str(max(users // 5, 10))]
    command += ["-t", f"{min(args.seconds, DURATION_CAP)}s", "--host", url, "--stop-timeout", "3"]
    command += ["--csv", str(out / "load"), "--only-summary", "--loglevel", "WARNING"]
    subprocess.run(command, cwd=ROOT, env=env, check=False, capture_output=True)
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    with (out / "load_stats.csv").open() as stats:
        report["stats"] = list(csv.DictReader(stats))
    return report


def drained(accepted: list[str], seconds: float = 30) -> Counter[str]:
    """Wait until the accepted jobs but the talking ones end; return the jobs by status."""
    from django_ratequeue.models import Job

    deadline = time.monotonic() + seconds
    while True:
        jobs = Job.objects.filter(pk__in=accepted)
        open_jobs = jobs.exclude(status__in=["complete", "failed", "canceled"])
        if not open_jobs.exclude(func__endswith=".talk").exists() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    by_status: Counter[str] = Counter()
    for func, status in jobs.values_list("func", "status"):
        by_status[f"{func.rsplit('.', 1)[-1]} {status}"] += 1
    return by_status


def table(report: dict[str, Any], seconds: float) -> list[str]:
    """Return the per-endpoint rows of the report, as Markdown."""
    lines = ["| endpoint | requests | req/s | p50 ms | p95 ms | p99 ms | failures |"]
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in report["stats"]:
        lines.append(
            f"| {row['Name']} | {row['Request Count']} | {float(row['Requests/s']):.1f} | "
            f"{row['50%']} | {row['95%']} | {row['99%']} | {row['Failure Count']} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("DJANGO_DEBUG", "0")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-load-" + "x" * 50)
    from django_ratequeue.conf import DEFAULTS

    overrides: dict[str, Any] = {"QUEUES": TALK_QUEUE}
    if "API_WSGI_THREADS" in DEFAULTS:  # not in the versions before it (a "before" run)
        overrides["API_WSGI_THREADS"] = args.threads
    os.environ["BENCH_RATEQUEUE"] = json.dumps(overrides)
    os.environ["BENCH_EXAMPLE_CONNECTIONS"] = "1"  # the example's connection settings
    import django

    django.setup()
    database = prepare_database()
    command = " ".join(["python -m bench.load", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*machine_lines(database), f"Python {platform.python_version()}"]))
    print(f"command: {command}\nload average before: {os.getloadavg()[0]:.2f}", flush=True)
    empty_tables()
    users = args.pollers + args.bulkers + args.streamers
    out = Path(tempfile.mkdtemp(prefix="bench-load-"))
    tokens = out / "tokens"
    tokens.write_text("\n".join(make_tokens(users)))
    cluster = Workers([["qcluster"]], {})
    peaks = Peaks()
    try:
        with served(args) as (url, pid, label):
            print(f"server: {label}", flush=True)
            sampler = threading.Thread(target=peaks.sample, args=(pid,), daemon=True)
            sampler.start()
            started = time.monotonic()
            report = run_locust(args, url, tokens, out)
            elapsed = time.monotonic() - started
            load = os.getloadavg()[0]
            peaks.stop.set()
            sampler.join()
        cluster.check_alive()
        jobs = drained(report["accepted"])
    finally:
        cluster.kill()
    print(f"users: {args.pollers} pollers, {args.bulkers} bulkers, {args.streamers} streamers")
    print(f"ran {elapsed:.0f} s; load average at the end: {load:.2f}\n")
    print("\n".join(table(report, elapsed)))
    codes = ", ".join(f"{name}: {n}" for name, n in sorted(report["codes"].items()))
    print(f"\nanswers by code: {codes}")
    print(f"jobs accepted: {len(report['accepted'])}; by status after the drain: {dict(jobs)}")
    print(f"peak database sessions: {peaks.connections}")
    print(f"peak server memory (RSS, all its processes): {peaks.memory / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

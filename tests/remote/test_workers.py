"""Remote worker processes (``python -m django_ratequeue.worker``, or the zipapp on a Python
without Django) against a real server process and a real cluster: work shared and never run twice,
a killed worker's attempt taken over once its lease lapses, a stopped worker's attempt
handed back at once; a worker that waits for its server, one given a wrong URL, one whose
report the server fails on."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import venv
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from django_ratequeue import JobFailed, clock, enqueue, enqueue_many
from django_ratequeue.engine.models import Attempt, Job, Outcome, Status
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.worker import KEY_VARIABLE
from tests.cluster import FAST_TIMINGS, ROOT, Cluster, database_url, wait_for
from tests.remote.conftest import REMOTE_QUEUES

OPTIONS = {"QUEUES": REMOTE_QUEUES, "REMOTE_LEASE": 1.0}


@dataclass
class Remote:
    """A server process, and remote worker processes started against it."""

    url: str
    port: int
    key: str
    options: dict[str, Any]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]]

    def serve(self) -> subprocess.Popen[bytes]:
        """Start the server (runserver) on the test database; return once it answers."""
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.queue.cluster_settings",
            "RATEQUEUE_OVERRIDES": json.dumps({**FAST_TIMINGS, **self.options}),
        }
        log = self.log_dir / f"server-{len(self.processes)}.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(server)
        wait_for(
            lambda: answers(f"{self.url}workers/claim/") or server.poll() is not None, 60, "server"
        )
        assert server.poll() is None, log.read_text()
        return server

    def worker(
        self,
        concurrency: int = 2,
        grace: float = 5.0,
        key_as_argument: bool = False,
        handlers: str = "tests.remote.handlers",
        path: tuple[Path, ...] = (),
    ) -> subprocess.Popen[bytes]:
        """Start a worker, its key in its environment (or given as ``--key``), its
        handlers imported from ``handlers`` (found on ``path`` too); its log is
        :meth:`log_of` it."""
        search = os.pathsep.join(map(str, (ROOT, *path)))
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": search}  # no Django settings
        key = ["--key", self.key] if key_as_argument else []
        if not key_as_argument:
            env[KEY_VARIABLE] = self.key
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django_ratequeue.worker",
                *("--url", self.url, *key, "--handlers", handlers),
                *("--concurrency", str(concurrency), "--grace", str(grace)),
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log_dir.joinpath(f"worker-{len(self.processes)}.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def log_of(self, process: subprocess.Popen[bytes]) -> str:
        return (self.log_dir / f"worker-{self.processes.index(process)}.log").read_text()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=1)
    except urllib.error.HTTPError:
        return True  # 401: up
    except OSError:
        return False
    return True


@pytest.fixture
def start_remote(
    cluster: Callable[..., Cluster], tmp_path: Path
) -> Iterator[Callable[..., Remote]]:
    """``start_remote(REMOTE_LEASE=...)``: a cluster and a server process with remote
    queues, and a key for them; its processes are killed at teardown."""
    started: list[Remote] = []

    def start(**overrides: Any) -> Remote:
        options = {**OPTIONS, **overrides}
        cluster(workers=1, **options)
        port = free_port()
        key = create_key("test workers", ["gpu"])[1]
        running = Remote(f"http://127.0.0.1:{port}/ratequeue/", port, key, options, tmp_path, [])
        started.append(running)
        running.serve()
        return running

    yield start
    for running in started:
        for process in running.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@pytest.fixture
def remote(start_remote: Callable[..., Remote]) -> Remote:
    return start_remote()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_two_workers_share_the_work_none_lost_none_twice(remote: Remote, tmp_path: Path) -> None:
    first, second = remote.worker(), remote.worker(key_as_argument=True)
    out = tmp_path / "ran.txt"
    count = 100
    enqueue_many(
        "tests.queue.jobs.record", [[str(out), str(n)] for n in range(count)], queue="gpu"
    )
    wait_for(lambda: Job.objects.filter(status=Status.COMPLETE).count() == count, 90, "all jobs")
    ran = [line.split() for line in lines(out)]
    assert Counter(label for label, _pid in ran) == Counter(str(n) for n in range(count))
    assert {int(pid) for _label, pid in ran} == {first.pid, second.pid}
    # Any other attempt is one whose claim's answer was lost: ended unstarted or lost.
    others = Attempt.objects.exclude(outcome=Outcome.SUCCEEDED)
    assert set(others.values_list("outcome", flat=True)) <= {"", Outcome.WORKER_LOST}


def test_a_worker_runs_async_handlers_in_all_its_slots_at_once(
    remote: Remote, tmp_path: Path
) -> None:
    """``--concurrency 8`` with an ``async def`` handler: the eight run at once, on the
    worker's one event loop."""
    worker = remote.worker(concurrency=8)
    out, release = tmp_path / "ran.txt", tmp_path / "release"
    handles = enqueue_many(
        "tests.queue.jobs.record_then_block",
        [[str(out), f"a{n}", str(release)] for n in range(8)],
        queue="gpu",
    )
    wait_for(lambda: len(lines(out)) == 8, 60, "eight handlers running at once")
    release.touch()
    assert [h.result(timeout=60) for h in handles] == [f"a{n}" for n in range(8)]
    ran = [line.split() for line in lines(out)]
    assert {(int(pid), thread) for _label, pid, thread in ran} == {
        (worker.pid, "worker-slot-loop")
    }


def test_a_killed_worker_s_attempt_completes_on_another(remote: Remote, tmp_path: Path) -> None:
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    doomed = remote.worker(concurrency=1)
    handle = enqueue(
        "tests.queue.jobs.block_until_file", args=[str(out), str(marker)], queue="gpu"
    )
    wait_for(lambda: f"start {doomed.pid}" in lines(out), 30, "the first worker to start it")
    survivor = remote.worker(concurrency=1)
    os.kill(doomed.pid, signal.SIGKILL)
    wait_for(lambda: f"start {survivor.pid}" in lines(out), 30, "the other worker to take over")
    marker.touch()
    assert handle.result(timeout=30) == "released"
    outcomes = list(Attempt.objects.filter(job_id=handle.id).order_by("number"))
    assert [a.outcome for a in outcomes] == [Outcome.WORKER_LOST, Outcome.SUCCEEDED]


def test_a_stopped_worker_hands_its_attempt_back(remote: Remote, tmp_path: Path) -> None:
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    stopping = remote.worker(concurrency=1, grace=0.2)
    handle = enqueue(
        "tests.queue.jobs.block_until_file", args=[str(out), str(marker)], queue="gpu"
    )
    wait_for(lambda: f"start {stopping.pid}" in lines(out), 30, "the first worker to start it")
    taker = remote.worker(concurrency=1)
    stopping.send_signal(signal.SIGTERM)
    assert stopping.wait(timeout=30) == 0
    wait_for(lambda: f"start {taker.pid}" in lines(out), 30, "the other worker to claim it")
    marker.touch()
    assert handle.result(timeout=30) == "released"
    # Handed back, it was not a try: one attempt, which succeeded.
    assert [a.outcome for a in Attempt.objects.filter(job_id=handle.id)] == [Outcome.SUCCEEDED]


def test_the_worker_program_needs_no_django() -> None:
    code = "import sys; sys.modules['django'] = None; import tests.remote.handlers"
    subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)}
    )


def test_a_worker_without_a_key_says_where_to_put_it() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "django_ratequeue.worker", "--url", "http://127.0.0.1:9/",
         "--handlers", "tests.remote.handlers"],
        cwd=ROOT, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert finished.returncode == 2
    assert f"no worker key: set {KEY_VARIABLE}, or give --key-file" in finished.stderr.decode()


def test_workers_outlive_a_server_restart(
    start_remote: Callable[..., Remote], tmp_path: Path
) -> None:
    """Reports sent while the server is away are sent again, unchanged, once it is back:
    with leases longer than the outage, every job completes, each exactly once. A claim
    whose answer died with the server may leave an attempt that never runs, ended when
    its lease lapses; no job runs twice and none is lost."""
    # A lease of a minute: the outage (the server's restart, and the workers' back-off of
    # up to BACKOFF_MAX before they try again) must stay shorter than it even on a loaded
    # machine, where 30 s once let a reported job's lease lapse before its report came.
    remote = start_remote(REMOTE_LEASE=60.0)
    remote.worker(), remote.worker()
    out = tmp_path / "ran.txt"
    count = 60
    enqueue_many(
        "tests.queue.jobs.record", [[str(out), str(n)] for n in range(count)], queue="gpu"
    )
    wait_for(lambda: len(lines(out)) >= count // 3, 60, "a third of the jobs to run")
    server = remote.processes[0]
    os.killpg(server.pid, signal.SIGKILL)
    killed = time.monotonic()
    server.wait(timeout=10)
    assert Job.objects.exclude(status=Status.COMPLETE).exists()  # work was left
    remote.serve()
    outage = time.monotonic() - killed
    wait_for(lambda: Job.objects.filter(status=Status.COMPLETE).count() == count, 150, "all jobs")
    ran = Counter(line.split()[0] for line in lines(out))
    assert ran == Counter(str(n) for n in range(count)), f"the server was away {outage:.1f} s"
    # Any other attempt is one whose claim's answer was lost: ended unstarted or lost.
    others = Attempt.objects.exclude(outcome=Outcome.SUCCEEDED)
    assert set(others.values_list("outcome", flat=True)) <= {"", Outcome.WORKER_LOST}


def test_a_job_ending_while_the_server_is_away_past_its_lease_runs_once(
    start_remote: Callable[..., Remote], tmp_path: Path
) -> None:
    """The server is away for several leases while a job ends: its worker holds the report
    and keeps beating the attempt's heartbeat; the loop, which runs on, does not take the
    attempt as lost while the key is silent. Back, the server renews the lapsed lease and
    takes the late report: the job completes, having run once (issue 31)."""
    remote = start_remote(REMOTE_LEASE=2.0)
    remote.worker(concurrency=1), remote.worker(concurrency=1)  # one would take a retry
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    handle = enqueue(
        "tests.queue.jobs.block_until_file",
        args=[str(out), str(marker)],
        kwargs={"limit": 300},
        queue="gpu",
        retries=2,
    )
    wait_for(lambda: lines(out), 60, "the job to start")
    server = remote.processes[0]
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    marker.touch()  # the handler returns; its report waits for the server
    attempt = Attempt.objects.get(job_id=handle.id)
    lapsed = attempt.lease_expires_at + timedelta(seconds=3 * 2.0)
    wait_for(lambda: clock.now() > lapsed, 60, "three leases to pass")
    attempt.refresh_from_db()
    assert attempt.ended_at is None, attempt.error  # the loop left it to its worker
    remote.serve()
    wait_for(lambda: Job.objects.get(pk=handle.id).status == Status.COMPLETE, 60, "the job")
    assert [line.split()[0] for line in lines(out)] == ["start"]
    assert list(Attempt.objects.filter(job_id=handle.id).values_list("outcome", flat=True)) == [
        Outcome.SUCCEEDED
    ]


def test_a_job_past_its_timeout_fails_at_once(remote: Remote, tmp_path: Path) -> None:
    """The worker interrupts the handler at the job's timeout and says so: the attempt
    ends timed out then, rather than holding its lease until recovery finds it overran."""
    out, marker = tmp_path / "ran.txt", tmp_path / "go"
    remote.worker(concurrency=1)
    handle = enqueue(
        "tests.queue.jobs.block_until_file",
        args=[str(out), str(marker)],
        queue="gpu",
        timeout=1,
    )
    ended = Attempt.objects.filter(job_id=handle.id).exclude(ended_at=None)
    wait_for(ended.exists, 30, "the attempt to end")
    marker.touch()
    attempt = ended.get()
    assert attempt.outcome == Outcome.TIMED_OUT
    assert attempt.error.startswith("The worker stopped the handler"), attempt.error


def command_line(process: subprocess.Popen[bytes]) -> str:
    return Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


# A handlers module for a host with the zipapp alone: it imports the worker as ``worker``.
ALONE = """
import importlib.util
import os

from worker import handler, stream_output

assert importlib.util.find_spec("django") is None, "this host has no Django"
assert importlib.util.find_spec("django_ratequeue") is None, "nor the package"


@handler("tests.queue.jobs.record")
def record(path, label):
    stream_output("on a host without Django")
    with open(path, "a") as out:
        out.write(f"{label} {os.getpid()}\\n")
    return label
"""


def test_the_worker_app_runs_on_a_python_without_django(remote: Remote, tmp_path: Path) -> None:
    """As docs/remote-workers.md says: the zipapp that ``ratequeue_worker_app`` builds, run
    by the Python of a new virtual environment (neither Django nor the package, no
    PYTHONPATH) beside a handlers module, its key in a file."""
    host = tmp_path / "host"
    venv.create(host / "venv", with_pip=False)
    call_command("ratequeue_worker_app", "--output", str(host / "ratequeue-worker.pyz"))
    (host / "gpu_handlers.py").write_text(ALONE)
    (host / "key").write_text(remote.key + "\n")
    with (tmp_path / "alone.log").open("wb") as log:
        process = subprocess.Popen(
            [str(host / "venv" / "bin" / "python"), "ratequeue-worker.pyz", "--url", remote.url,
             "--key-file", "key", "--handlers", "gpu_handlers"],
            cwd=host, env={"PATH": os.environ["PATH"]}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    remote.processes.append(process)
    handle = enqueue(
        "tests.queue.jobs.record", args=[str(tmp_path / "ran.txt"), "alone"], queue="gpu"
    )
    assert handle.result(timeout=60) == "alone", (tmp_path / "alone.log").read_text()
    assert handle.output() == ["on a host without Django"]
    assert lines(tmp_path / "ran.txt") == [f"alone {process.pid}"]
    assert remote.key not in command_line(process)


def test_a_worker_started_before_its_server_waits_for_it_quietly(
    remote: Remote, tmp_path: Path
) -> None:
    """As in the demo, which starts the web server and the worker together: no "Server
    away" warnings while the server has never answered, one line saying it waits."""
    server = remote.processes[0]
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    worker = remote.worker()
    wait_for(lambda: "Waiting for the server" in remote.log_of(worker), 30, "the worker to wait")
    remote.serve()
    handle = enqueue("tests.queue.jobs.record", args=[str(tmp_path / "ran"), "late"], queue="gpu")
    assert handle.result(timeout=60) == "late"
    log = remote.log_of(worker)
    assert log.count(f"Waiting for the server at {remote.url}workers/") == 1, log
    assert "Server away" not in log, log


@pytest.mark.django_db(transaction=True)
def test_a_wrong_url_says_which_was_tried_and_what_it_should_be(live_server: Any) -> None:
    wrong = f"{live_server.url}/nothing-here/"
    finished = subprocess.run(
        [sys.executable, "-m", "django_ratequeue.worker", "--url", wrong,
         "--handlers", "tests.remote.handlers"],
        cwd=ROOT, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), KEY_VARIABLE: "a.b"},
        capture_output=True, timeout=60,
    )  # fmt: skip
    log = finished.stderr.decode()
    assert finished.returncode == 2, log
    assert f"404 from {wrong}workers/claim/: nothing answers at {wrong}." in log
    assert "--url must be where the project mounts django_ratequeue.urls, such as" in log


@pytest.mark.postgres_only
@pytest.mark.parametrize("lease", [30.0, 1.0])
def test_a_report_the_server_fails_on_fails_its_attempt_and_the_worker_goes_on(
    start_remote: Callable[..., Remote], tmp_path: Path, lease: float
) -> None:
    """The server answers 500 to one result however often it is sent (here a trigger
    raises on it, as a bug in the server would): the worker tries a few times, reports
    the attempt failed, saying so, and goes on claiming. The tries take seconds, several
    leases of 1 s: the worker beats the attempt's heartbeat meanwhile, so that it is not
    taken as lost (issue 31)."""
    remote = start_remote(REMOTE_LEASE=lease)
    with connection.cursor() as cursor:
        cursor.execute(BREAK_ON_BOOM)
    try:
        worker = remote.worker(concurrency=1)
        out = str(tmp_path / "ran")
        boom = enqueue("tests.queue.jobs.record", args=[out, "boom"], queue="gpu", retries=0)
        with pytest.raises(JobFailed) as failed:
            boom.result(timeout=90)
        assert failed.value.error.startswith(
            "The server did not take this attempt's complete report in: 500 from "
            f"{remote.url}workers/attempts/"
        ), failed.value.error
        after = enqueue("tests.queue.jobs.record", args=[out, "after"], queue="gpu")
        assert after.result(timeout=60) == "after", remote.log_of(worker)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(MEND)


# A server that fails on one value: PostgreSQL raises on any attempt row that would hold it.
BREAK_ON_BOOM = """
CREATE FUNCTION ratequeue_test_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.result = '"boom"'::jsonb THEN RAISE EXCEPTION 'the server breaks on boom'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ratequeue_test_boom BEFORE UPDATE ON django_ratequeue_attempt
    FOR EACH ROW EXECUTE FUNCTION ratequeue_test_boom();
"""
MEND = """
DROP TRIGGER ratequeue_test_boom ON django_ratequeue_attempt;
DROP FUNCTION ratequeue_test_boom();
"""


# A handlers module that exports its spans to a file, as a host with the OpenTelemetry SDK.
TRACED = """
import json

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from django_ratequeue.worker import handler


class ToFile(SpanExporter):
    def export(self, spans):
        with open(SPANS, "a") as out:
            for span in spans:
                parent = span.parent and format(span.parent.span_id, "016x")
                trace_id = format(span.context.trace_id, "032x")
                out.write(json.dumps([span.name, trace_id, parent]) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)


@handler("tests.queue.jobs.record")
def record(path, label):
    return label
"""


def test_a_remote_attempt_s_span_continues_the_enqueuing_request_s_trace(
    remote: Remote, tmp_path: Path
) -> None:
    spans = tmp_path / "spans.jsonl"
    host = tmp_path / "host"
    host.mkdir()
    (host / "traced_handlers.py").write_text(f"SPANS = {str(spans)!r}\n" + TRACED)
    remote.worker(handlers="traced_handlers", path=(host,))
    request = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(request)))
    try:
        handle = enqueue("tests.queue.jobs.record", args=["unused", "traced"], queue="gpu")
    finally:
        otel_context.detach(token)
    assert handle.result(timeout=60) == "traced"
    _version, trace_id, enqueue_span, _flags = Job.objects.get(pk=handle.id).traceparent.split("-")
    assert trace_id == "0af7651916cd43dd8448eb211c80319c"  # the request's trace
    wait_for(lambda: lines(spans), 30, "the worker to export its span")
    [(name, run_trace, run_parent)] = [json.loads(line) for line in lines(spans)]
    assert (name, run_trace, run_parent) == ("run tests.queue.jobs.record", trace_id, enqueue_span)

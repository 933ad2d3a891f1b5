"""A fault drill: a steady load of jobs while the database and the processes fail, measured.

    .venv/bin/python -m bench.faults            # 3 to 8 minutes (longer when faults stick)
    .venv/bin/python -m bench.faults --quick    # 400 jobs

The drill runs on a PostgreSQL server of its own: ``initdb`` into a temporary directory
(as the ``postgres`` user when run as root) and ``pg_ctl start`` on 127.0.0.1, port 55432
unless ``--port`` says otherwise, with the binaries of the newest
``/usr/lib/postgresql/*/bin`` (or ``--pg-bin``). It restarts that server and no other; the
server and its directory are gone at the end.

A ``qcluster`` (``--workers`` workers, ratequeue's timings at their defaults) runs the jobs;
a producer thread in this process enqueues ``--jobs`` jobs at ``--rate`` per second over
three queues with concurrency limits (``alpha`` 2, ``beta`` 1, ``gamma`` 2 in all and 1 per
concurrency key, four keys; at most 4 jobs at once in all), each job sleeping 20 to 80 ms.
While it runs, the faults (``--faults``) come one after another, each once the one before
has recovered, or 60 s later; one not recovered by then is followed by a restart of the
cluster, as a supervisor would do it, so that the next fault meets a working cluster:

- ``restart``: PostgreSQL restarted (``pg_ctl restart -m fast``); or ``terminate``:
  ``pg_terminate_backend`` of every other connection to the drill's database (the CI test);
- ``kill-loop``: ``kill -9`` of the worker whose transaction holds the loop's row (a loop
  step in progress), while its pass runs as a django-q2 task;
- ``kill-worker``: ``kill -9`` of a worker in the middle of a job;
- ``kill-idle``: ``kill -9`` of a worker waiting for a task;
- ``poison-exit``: a poison job that raises ``SystemExit``;
- ``poison-retry``: a poison job that fails, with a retry interval of ``sys.maxsize`` s.

The observer: every job appends its start and its end, with its process id, to a file (it
outlives restarts and kills; a run killed by the drill ends at the kill). From it:

- *recovered in*: from the fault until every job that was running when it hit (an active
  attempt), the poison, and a probe job enqueued once the fault was over, have finished;
- *jobs lost*: jobs the drill enqueued (load, probes) that are not complete at the end,
  counted in the row of the fault they last ran (or were enqueued) under;
- *run twice at once*: jobs with two runs that overlap in time;
- *limits exceeded*: starts that took a queue, a concurrency key or the whole environment
  past its limit;
- *re-run*: jobs that ran again (allowed: an attempt cut short runs again, see
  docs/operations.md).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

QUEUES: dict[str, dict[str, int]] = {
    "alpha": {"max_concurrency": 2},
    "beta": {"max_concurrency": 1},
    "gamma": {"max_concurrency": 1, "total_concurrency": 2},
}
KEYS = ["k0", "k1", "k2", "k3"]  # gamma's concurrency keys
SETTINGS: dict[str, Any] = {"MAX_CONCURRENCY": 4, "QUEUES": QUEUES}
PROBE_QUEUE = "alpha"
OUTAGE_LIMIT = 120.0  # seconds a database call keeps trying through an outage


# -- the load ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """One job of the load: its id (also the observer's label), queue and key."""

    label: str
    queue: str
    key: str = ""
    seconds: float = 0.05
    priority: int = 0


def plan(count: int, prefix: str = "j", seed: int = 8) -> list[Planned]:
    """``count`` jobs over the three queues: alpha 40%, beta 20%, gamma 40% (four keys)."""
    chance = random.Random(seed)
    jobs = []
    for n in range(count):
        queue = ("alpha", "alpha", "beta", "gamma", "gamma")[n % 5]
        key = KEYS[n // 5 % len(KEYS)] if queue == "gamma" else ""
        jobs.append(Planned(f"{prefix}{n}", queue, key, round(chance.uniform(0.02, 0.08), 3)))
    return jobs


def through_outages(action: Callable[[], T], limit: float = OUTAGE_LIMIT) -> T:
    """Run ``action`` until it gets through a lost connection or a database that is
    restarting (on a new connection each time); give up after ``limit`` seconds."""
    from django.db import InterfaceError, OperationalError, connection

    deadline = time.monotonic() + limit
    pause = 0.05
    while True:
        try:
            return action()
        except (OperationalError, InterfaceError):
            if time.monotonic() > deadline:
                raise
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def enqueue_planned(log: Path, job: Planned) -> None:
    """Enqueue one observed job under its own id: an enqueue repeated after an error that
    hid a commit finds the job there and adds nothing."""
    from bench.jobs import observed_run
    from django_ratequeue import enqueue

    through_outages(
        lambda: enqueue(
            observed_run,
            args=[str(log), job.label, job.seconds],
            queue=job.queue,
            concurrency_key=job.key,
            priority=job.priority,
            id=job.label,
            on_duplicate_id="ignore",
        )
    )


class Producer(threading.Thread):
    """Enqueues the planned jobs one at a time at ``rate`` per second, as web requests would."""

    def __init__(self, log: Path, jobs: list[Planned], rate: float) -> None:
        super().__init__(name="drill-producer", daemon=True)
        self.log, self.jobs, self.rate = log, jobs, rate
        self.enqueued = 0
        self.error: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        from django.db import connection

        began = time.monotonic()
        try:
            for n, job in enumerate(self.jobs):
                if self.stopping.wait(max(0.0, began + n / self.rate - time.monotonic())):
                    return
                enqueue_planned(self.log, job)
                self.enqueued = n + 1
        except BaseException:  # reported by the drill
            self.error = traceback.format_exc()
        finally:
            connection.close()


# -- processes ---------------------------------------------------------------------------


def group_pids(leader: int) -> list[int]:
    """The processes of ``leader``'s process group (a qcluster started in its own session)."""
    found = subprocess.run(
        ["ps", "-o", "pid=", "-g", str(leader)], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in found.stdout.split()]


def pid_of_client_port(port: int, pids: Sequence[int]) -> int | None:
    """Which of ``pids`` owns the local TCP port ``port`` (a database client's end)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        with suppress(OSError):
            for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        with suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return pid
    return None


def waits_for_a_task(pid: int) -> bool:
    """Whether ``pid``'s main thread is blocked reading a pipe: a django-q2 worker idle in
    ``get()`` on the cluster's task queue, which holds the queue's read lock meanwhile."""
    with suppress(OSError):
        return "pipe_read" in Path(f"/proc/{pid}/task/{pid}/wchan").read_text()
    return False


def loop_holders() -> list[int]:
    """Client ports of the other sessions whose open transaction wrote the loop's row: a
    loop step renews the lease first, so that is the process running the loop."""
    from django.db import connection

    from django_ratequeue.engine.models import LoopState

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'relation' AND l.relation = %s::regclass
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.mode = 'RowExclusiveLock' AND l.granted AND l.pid <> pg_backend_pid()
              AND a.client_port IS NOT NULL
            """,
            [LoopState._meta.db_table],
        )
        return [port for (port,) in cursor.fetchall()]


def terminate_connections() -> int:
    """End every other session on this database (``pg_terminate_backend``); how many."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


# -- the observer ------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run of a job as its process recorded it. ``end`` is the kill's time for a run
    the drill killed, and None for one that has no end for another reason (counted as
    running until the drill ended)."""

    label: str
    pid: int
    start: float
    end: float | None


def read_runs(log: Path, killed: dict[int, float]) -> list[Run]:
    """The runs in the observer's file, paired by process (a process runs one job at a time)."""
    runs: list[Run] = []
    running: dict[int, tuple[str, float]] = {}
    text = log.read_text() if log.exists() else ""
    for line in text.splitlines():
        kind, label, pid_text, moment_text = line.split()
        pid, moment = int(pid_text), float(moment_text)
        if kind == "start":
            if pid in running:  # the process went on, so that run ended before this one
                earlier_label, earlier = running.pop(pid)
                runs.append(Run(earlier_label, pid, earlier, moment))
            running[pid] = (label, moment)
        elif pid in running:
            started_label, started = running.pop(pid)
            runs.append(Run(started_label, pid, started, moment))
    for pid, (label, started) in running.items():
        runs.append(Run(label, pid, started, killed.get(pid)))
    return runs


def groups(job: Planned) -> list[str]:
    """The limits a job counts towards: the environment's, its queue's, its key's."""
    found = ["all", job.queue]
    if job.key:
        found.append(f"{job.queue}/{job.key}")
    return found


def limits(settings: dict[str, Any]) -> dict[str, int]:
    """Each group's limit, from ``RATEQUEUE`` settings."""
    found = {"all": settings["MAX_CONCURRENCY"]}
    for name, queue in settings["QUEUES"].items():
        # Each key is a copy of the queue under max_concurrency; only gamma has keys, and
        # its total_concurrency caps them together.
        found[name] = queue.get("total_concurrency") or queue.get("max_concurrency", 1)
        for key in KEYS:
            found[f"{name}/{key}"] = queue.get("max_concurrency", 1)
    return found


@dataclass
class Findings:
    """What the observer saw: overlapping runs of one job, starts past a limit, peaks."""

    twice: dict[str, float] = field(default_factory=dict)  # job → when it overlapped
    exceeded: list[tuple[float, str]] = field(default_factory=list)  # (when, group)
    peaks: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)  # job → its runs
    reruns: dict[str, float] = field(default_factory=dict)  # job → its second run's start
    unended: int = 0


def examine(runs: list[Run], jobs: dict[str, Planned], limit: dict[str, int]) -> Findings:
    """Sweep the runs in time order, counting what runs at once in every group."""
    findings = Findings()
    until = max((run.end or run.start for run in runs), default=0.0)
    by_job: dict[str, list[Run]] = defaultdict(list)
    events: list[tuple[float, int, str]] = []
    for run in runs:
        by_job[run.label].append(run)
        findings.unended += run.end is None
        events += [(run.start, 1, run.label), (run.end or until, 0, run.label)]
    for label, its_runs in by_job.items():
        its_runs.sort(key=lambda run: run.start)
        findings.runs[label] = len(its_runs)
        if len(its_runs) > 1:
            findings.reruns[label] = its_runs[1].start
        for earlier, later in itertools.pairwise(its_runs):
            if later.start < (earlier.end or until):
                findings.twice.setdefault(label, later.start)
    now: Counter[str] = Counter()
    for moment, starts, label in sorted(events):  # ends before starts at the same moment
        for group in groups(jobs[label]):
            now[group] += 1 if starts else -1
            findings.peaks[group] = max(findings.peaks[group], now[group])
        over = [g for g in groups(jobs[label]) if starts and now[g] > limit[g]]
        if over:
            findings.exceeded.append((moment, ", ".join(over)))
    return findings


# -- faults ------------------------------------------------------------------------------


class DrillError(Exception):
    """The drill could not inject a fault (not a finding about the queue)."""


@dataclass
class Hit:
    """One injected fault and what became of it."""

    fault: str
    at: float  # time.time() when it struck
    in_flight: list[str] = field(default_factory=list)  # jobs with an active attempt then
    watch: list[str] = field(default_factory=list)  # jobs that must end too: poison, probe
    # Jobs that must at least have left RUNNING (a poison whose retry is due in ages).
    parked: list[str] = field(default_factory=list)
    note: str = ""
    recovered_at: float | None = None
    resumed_at: float | None = None  # the first job that completed after the fault struck

    @property
    def recovery(self) -> float | None:
        return None if self.recovered_at is None else max(self.recovered_at - self.at, 0.0)

    def seconds(self, moment: float | None) -> str:
        return "NOT" if moment is None else f"{max(moment - self.at, 0.0):.1f} s"


class Fault:
    name = ""

    def inject(self, drill: Drill) -> Hit:
        raise NotImplementedError


class RestartDatabase(Fault):
    """Restart the drill's own PostgreSQL server with ``restart`` (never a shared one)."""

    name = "PostgreSQL restarted (pg_ctl restart -m fast)"

    def __init__(self, restart: Callable[[], None]) -> None:
        self.restart = restart

    def inject(self, drill: Drill) -> Hit:
        hit = drill.strike(self.name)
        self.restart()
        hit.note = f"server down and up again in {time.time() - hit.at:.1f} s"
        return hit


class TerminateConnections(Fault):
    name = "every connection terminated (pg_terminate_backend)"

    def inject(self, drill: Drill) -> Hit:
        hit = drill.strike(self.name)
        hit.note = f"{terminate_connections()} sessions ended"
        return hit


class KillLoop(Fault):
    """``kill -9`` of the process whose transaction holds the loop's row: the leader's
    process, in the middle of a step (its agent thread's)."""

    name = "the loop's leader killed (kill -9) mid-step"

    def inject(self, drill: Drill) -> Hit:
        def find() -> int | None:
            pids = drill.cluster_pids()
            for port in through_outages(loop_holders):
                pid = pid_of_client_port(port, pids)
                if pid is not None:
                    return pid
            return None

        pid = drill.wait_for_target(find, "a loop step in a worker", pause=0.002)
        idle = " (its main thread idle, waiting for a task)" if waits_for_a_task(pid) else ""
        return drill.kill(pid, self.name, f"mid-step{idle}")


class KillIdleWorker(Fault):
    """``kill -9`` of a worker waiting for a task (the OOM killer may pick one): the one
    whose main thread reads the cluster's task queue, holding its read lock."""

    name = "an idle worker killed (kill -9)"

    def inject(self, drill: Drill) -> Hit:
        from django_ratequeue.engine.models import WorkerHeartbeat

        def find() -> int | None:
            pids = drill.cluster_pids()
            workers = through_outages(
                lambda: set(
                    WorkerHeartbeat.objects.filter(pid__in=pids).values_list("pid", flat=True)
                )
            )
            return next((pid for pid in workers if waits_for_a_task(pid)), None)

        return drill.kill(drill.wait_for_target(find, "an idle worker", pause=0.01), self.name, "")


class KillWorker(Fault):
    name = "a worker killed mid-job (kill -9)"

    def inject(self, drill: Drill) -> Hit:
        def find() -> tuple[int, str] | None:
            pids = set(drill.cluster_pids())
            running = [
                run
                for run in read_runs(drill.log, drill.killed)
                if run.end is None and run.pid in pids
            ]
            if not running:
                return None
            latest = max(running, key=lambda run: run.start)
            return latest.pid, latest.label

        pid, label = drill.wait_for_target(find, "a job running in a worker", pause=0.01)
        return drill.kill(pid, self.name, f"running {label}")


class PoisonExit(Fault):
    name = "poison: a job raising SystemExit"

    def inject(self, drill: Drill) -> Hit:
        from bench.jobs import exit_worker
        from django_ratequeue import enqueue

        hit = drill.strike(self.name)
        handle = through_outages(lambda: enqueue(exit_worker, queue="alpha", retries=0))
        hit.watch.append(handle.id)
        return hit


class PoisonRetry(Fault):
    name = "poison: a failing job retried after sys.maxsize s"

    def inject(self, drill: Drill) -> Hit:
        from bench.jobs import fail
        from django_ratequeue import enqueue

        hit = drill.strike(self.name)
        retries = {"retry_count": 1, "initial_interval": sys.maxsize, "max_interval": sys.maxsize}
        try:
            handle = through_outages(lambda: enqueue(fail, queue="alpha", retries=retries))
        except ValueError as refused:
            hit.note = f"refused at enqueue: {refused}"
        else:
            hit.parked.append(handle.id)
        return hit


# -- the drill ---------------------------------------------------------------------------


@dataclass
class Report:
    """The drill's outcome: one row per fault, and the totals over every job."""

    started: float
    hits: list[Hit]
    enqueued: int
    lost: dict[str, float]  # job → when it was last seen (its last start, or its creation)
    findings: Findings
    limit: dict[str, int]
    notes: list[str]

    def table(self) -> str:
        header = [
            "fault",
            "injected at",
            "first completion after",
            "recovered in",
            "jobs in flight",
            "re-run",
            "jobs lost",
            "run twice at once",
            "limits exceeded",
        ]
        lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        bounds = [self.started, *(hit.at for hit in self.hits), float("inf")]
        names = ["steady load, before the first fault", *(hit.fault for hit in self.hits)]
        for n, name in enumerate(names):
            low, high = bounds[n], bounds[n + 1]

            def within(moments: Any, low: float = low, high: float = high) -> int:
                return sum(low <= moment < high for moment in moments)

            hit = self.hits[n - 1] if n else None
            cells = [
                name,
                f"{low - self.started:.1f} s",
                hit.seconds(hit.resumed_at) if hit else "—",
                hit.seconds(hit.recovered_at) if hit else "—",
                str(len(hit.in_flight)) if hit else "—",
                str(within(self.findings.reruns.values())),
                str(within(self.lost.values())),
                str(within(self.findings.twice.values())),
                str(within(moment for moment, _ in self.findings.exceeded)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        total = [
            f"all {self.enqueued:,} jobs, {len(self.hits)} faults",
            "",
            "",
            "",
            "",
            str(len(self.findings.reruns)),
            str(len(self.lost)),
            str(len(self.findings.twice)),
            str(len(self.findings.exceeded)),
        ]
        lines.append("| " + " | ".join(f"**{cell}**" if cell else "" for cell in total) + " |")
        return "\n".join(lines)

    def details(self) -> list[str]:
        lines = [f"- {hit.fault}: {hit.note}" for hit in self.hits if hit.note]
        peaks = ", ".join(
            f"{group} {self.findings.peaks[group]}/{limit}"
            for group, limit in self.limit.items()
            if group in self.findings.peaks
        )
        lines.append(f"- most jobs seen running at once (seen/limit): {peaks}")
        if self.findings.unended:
            lines.append(f"- {self.findings.unended} runs have no end and were not killed")
        for label in sorted(self.lost)[:10]:
            lines.append(f"- lost: {label}")
        for moment, group in self.findings.exceeded[:10]:
            lines.append(f"- limit exceeded at {moment - self.started:.2f} s: {group}")
        return lines + [f"- {note}" for note in self.notes]


class Drill:
    """Run the load, inject ``faults`` one after another, wait for recovery, report.

    ``cluster_pids`` lists the processes of the cluster under test (whose workers may be
    killed). Each fault waits ``pause`` seconds of steady load after the previous one
    recovered (see :meth:`await_recovery`); a fault not recovered in ``recovery_limit``
    seconds is reported as such, and then ``restart_cluster``, if given, restarts the
    cluster as a supervisor would, so that the next fault meets a working one.
    """

    def __init__(
        self,
        log: Path,
        jobs: list[Planned],
        rate: float,
        cluster_pids: Callable[[], list[int]],
        *,
        pause: float = 3.0,
        recovery_limit: float = 90.0,
        stall_limit: float = 45.0,
        confirm_after: float = 12.0,
        restart_cluster: Callable[[], None] | None = None,
        print_progress: bool = False,
    ) -> None:
        self.log, self.planned, self.rate = log, jobs, rate
        self.cluster_pids = cluster_pids
        self.pause, self.recovery_limit, self.stall_limit = pause, recovery_limit, stall_limit
        self.print_progress = print_progress
        self.restart_cluster = restart_cluster
        self.confirm_after = confirm_after
        self.jobs = {job.label: job for job in jobs}
        self.killed: dict[int, float] = {}
        self.producer = Producer(log, jobs, rate)
        self.extras: list[str] = []

    def say(self, text: str) -> None:
        if self.print_progress:
            print(f"  {time.time() - self.started:6.1f} s  {text}", flush=True)

    def run(self, faults: Sequence[Fault]) -> Report:
        from django.conf import settings

        from django_ratequeue.engine.models import Status

        self.started = time.time()
        self.producer.start()
        hits: list[Hit] = []
        notes: list[str] = []
        try:
            self.wait_until(
                lambda: self.count(Status.COMPLETE) > 0, 120, "the first job to complete"
            )
            for n, fault in enumerate(faults):
                time.sleep(self.pause)
                if not self.producer.is_alive():
                    self.fill(f"fill{n}-")  # keep work going through the fault
                self.say(f"injecting: {fault.name}")
                try:
                    hit = fault.inject(self)
                except DrillError as missed:
                    self.say(f"not injected: {missed}")
                    notes.append(f"{fault.name}: not injected: {missed}")
                    continue
                probe = Planned(f"probe{n}", PROBE_QUEUE, seconds=0.01, priority=10)
                self.add(probe)
                hit.watch.append(probe.label)
                hit.recovered_at = self.await_recovery(hit, n)
                hit.resumed_at = self.resumed(hit)
                for job_id in hit.watch[:-1] + hit.parked:  # the poison, not the probe
                    hit.note = f"{hit.note}; " if hit.note else ""
                    hit.note += f"the poison {self.describe(job_id)}"
                self.say(f"recovered in {hit.seconds(hit.recovered_at)}")
                if hit.recovered_at is None and self.restart_cluster is not None:
                    self.say("restarting the cluster, as a supervisor would")
                    self.restart_cluster()
                    after = self.await_recovery(hit, n)
                    hit.note = (f"{hit.note}; " if hit.note else "") + (
                        f"not recovered in {self.recovery_limit:g} s: the drill restarted the "
                        "cluster, "
                        + (
                            f"after which its jobs ended {after - hit.at:.1f} s after the fault"
                            if after is not None
                            else "which did not help"
                        )
                    )
                hits.append(hit)
            self.producer.join(timeout=len(self.planned) / self.rate + self.recovery_limit)
            if self.producer.error is not None:
                notes.append(f"the producer stopped after {self.producer.enqueued} jobs:")
                notes.append(self.producer.error)
            self.settle()
        finally:
            self.producer.stopping.set()
            self.producer.join(timeout=30)
        findings = examine(read_runs(self.log, self.killed), self.jobs, limits(settings.RATEQUEUE))
        lost = self.lost()
        if lost:
            notes.append(f"where the jobs left waiting are stuck: {self.diagnose()}")
        enqueued = len(self.expected())
        if enqueued < len(self.planned) + len(self.extras):
            notes.append(f"{len(self.planned) - self.producer.enqueued} jobs never enqueued")
        return Report(
            self.started, hits, enqueued, lost, findings, limits(settings.RATEQUEUE), notes
        )

    # -- helpers of the faults

    def strike(self, fault: str) -> Hit:
        """A fault strikes now: note the jobs in flight."""
        from django_ratequeue.engine.models import Attempt

        in_flight = through_outages(
            lambda: list(
                Attempt.objects.filter(active=True).values_list("job_id", flat=True).distinct()
            )
        )
        return Hit(fault, time.time(), in_flight=in_flight)

    def kill(self, pid: int, fault: str, what: str) -> Hit:
        at = time.time()
        os.kill(pid, signal.SIGKILL)
        self.killed[pid] = time.time()
        hit = self.strike(fault)
        hit.at = at
        hit.note = f"pid {pid}" + (f", {what}" if what else "")
        return hit

    def wait_for_target(self, find: Callable[[], T | None], what: str, pause: float) -> T:
        """Poll ``find`` for a process to strike; after 5 s without one, add work (the load
        may have ended); fail after 60 s."""
        began = time.monotonic()
        filled = False
        while (found := find()) is None:
            if not filled and time.monotonic() - began > 5:
                self.fill(f"fill{len(self.killed)}k-")
                filled = True
            if time.monotonic() - began > 60:
                raise DrillError(f"found no {what} to strike in 60 s")
            time.sleep(pause)
        return found

    def fill(self, prefix: str) -> None:
        """Enqueue 20 more observed jobs (counted like the load's)."""
        for job in plan(20, prefix=prefix, seed=len(self.extras)):
            self.add(job)

    def add(self, job: Planned) -> None:
        self.jobs[job.label] = job
        enqueue_planned(self.log, job)
        self.extras.append(job.label)

    def expected(self) -> list[str]:
        """The jobs enqueued so far (the load's, the probes, the fillers)."""
        return [job.label for job in self.planned[: self.producer.enqueued]] + self.extras

    # -- waiting

    def count(self, *statuses: str) -> int:
        from django_ratequeue.engine.models import Job

        return through_outages(lambda: Job.objects.filter(status__in=statuses).count())

    def wait_until(self, condition: Callable[[], bool], limit: float, what: str) -> None:
        deadline = time.monotonic() + limit
        while not condition():
            if time.monotonic() > deadline:
                raise DrillError(f"timed out after {limit:g} s waiting for {what}")
            time.sleep(0.05)

    def await_recovery(self, hit: Hit, n: int) -> float | None:
        """When the jobs the fault hit, and those it watches, had all ended, and those it
        parks had left RUNNING (None: not within ``recovery_limit``). Confirmed by one more
        probe, enqueued ``confirm_after`` seconds after the fault, completing too (passes a
        runner runs itself keep a cluster going a while without its task queue)."""
        from django_ratequeue.engine.models import FINAL_STATUSES, Job, Status

        ended = set(hit.in_flight) | set(hit.watch)
        confirm = Planned(f"confirm{n}", PROBE_QUEUE, seconds=0.01, priority=10)
        deadline = time.monotonic() + self.recovery_limit
        parked_at = recovered_at = 0.0
        while time.monotonic() < deadline:
            if confirm.label not in self.jobs and time.time() > hit.at + self.confirm_after:
                self.add(confirm)
            rows = through_outages(
                lambda: list(
                    Job.objects.filter(
                        pk__in=ended | set(hit.parked) | {confirm.label}
                    ).values_list("pk", "status", "finished_at")
                )
            )
            done = {pk: finished for pk, status, finished in rows if status in FINAL_STATUSES}
            left = {pk for pk, status, _ in rows if status not in (Status.RUNNING, Status.WAITING)}
            if not parked_at and left >= set(hit.parked):
                parked_at = time.time()
            if not recovered_at and ended <= set(done) and parked_at:
                recovered_at = max(
                    [parked_at if hit.parked else 0.0]
                    + [moment.timestamp() for pk in ended if (moment := done[pk])]
                )
            if recovered_at and confirm.label in done:
                return recovered_at
            time.sleep(0.1)
        return None

    def describe(self, job_id: str) -> str:
        """A job's status and its attempts' outcomes, for the report."""
        from django_ratequeue.engine.models import Attempt, Job

        status = through_outages(
            lambda: Job.objects.filter(pk=job_id).values_list("status", "error").first()
        )
        outcomes = through_outages(
            lambda: list(
                Attempt.objects.filter(job_id=job_id)
                .order_by("number")
                .values_list("outcome", flat=True)
            )
        )
        if status is None:
            return f"{job_id} is gone"
        tries = ", ".join(outcome or "no outcome" for outcome in outcomes) or "none"
        error = f" ({status[1][:120]})" if status[1] else ""
        return f"is {status[0]}{error}; its attempts: {tries}"

    def resumed(self, hit: Hit) -> float | None:
        """When the first job completed after ``hit`` struck."""
        from django.db.models import Min

        from django_ratequeue.engine.models import Job, Status

        first = through_outages(
            lambda: Job.objects.filter(
                status=Status.COMPLETE, finished_at__gt=datetime.fromtimestamp(hit.at, UTC)
            ).aggregate(first=Min("finished_at"))["first"]
        )
        return None if first is None else first.timestamp()

    def settle(self) -> None:
        """Wait until every job of the drill has ended, or nothing ended for
        ``stall_limit`` seconds."""
        from django_ratequeue.engine.models import FINAL_STATUSES, Job

        def ended() -> int:
            return through_outages(
                lambda: Job.objects.filter(pk__in=expected, status__in=FINAL_STATUSES).count()
            )

        expected = self.expected()
        last, since = -1, time.monotonic()
        while (done := ended()) < len(expected):
            if done != last:
                last, since = done, time.monotonic()
            elif time.monotonic() - since > self.stall_limit:
                self.say(f"stalled: {done} jobs ended, nothing more in {self.stall_limit:g} s")
                return
            time.sleep(0.2)

    def diagnose(self) -> str:
        """The loop's state, its active attempts and the broker's tasks, for a stuck drill."""
        from django_q.models import OrmQ

        from django_ratequeue.engine.models import Attempt, Job, LoopState

        def read() -> str:
            now = time.time()
            loop = LoopState.objects.values_list("state", "generation").first()
            statuses = Counter(Job.objects.values_list("status", flat=True))
            attempts = []
            for started, ended, dispatched in Attempt.objects.filter(active=True).values_list(
                "started_at", "ended_at", "dispatched_at"
            ):
                where = "ended" if ended else "running" if started else "never claimed"
                attempts.append(f"{where} (dispatched {now - dispatched.timestamp():.0f} s ago)")
            tasks = [
                f"locked until {lock.timestamp() - now:+.0f} s" if lock else "not taken"
                for lock in OrmQ.objects.values_list("lock", flat=True)
            ]
            return (
                f"loop {loop}; jobs {dict(statuses)}; active attempts: "
                f"{', '.join(attempts) or 'none'}; django-q2 tasks in the broker: "
                f"{', '.join(tasks) or 'none'}"
            )

        return through_outages(read)

    def lost(self) -> dict[str, float]:
        """The jobs enqueued that are not complete, with when each was last seen."""
        from django_ratequeue.engine.models import Job, Status

        expected = self.expected()
        rows = {
            pk: (status, created.timestamp())
            for pk, status, created in through_outages(
                lambda: list(
                    Job.objects.filter(pk__in=expected).values_list("pk", "status", "created_at")
                )
            )
        }
        last_seen: dict[str, float] = {label: created for label, (_, created) in rows.items()}
        for run in read_runs(self.log, self.killed):
            last_seen[run.label] = max(run.start, last_seen.get(run.label, 0.0))
        return {
            label: last_seen.get(label, self.started)
            for label in expected
            if rows.get(label, ("missing", 0.0))[0] != Status.COMPLETE
        }


# -- a PostgreSQL server of the drill's own ---------------------------------------------


def postgres_bin(given: str | None) -> Path:
    """The directory of ``initdb`` and ``pg_ctl``: given, newest installed, or on PATH."""
    if given:
        return Path(given)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: int(Path(path).parent.name)
    )
    if found:
        return Path(found[-1])
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl is None:
        raise SystemExit("no PostgreSQL binaries found: pass --pg-bin")
    return Path(pg_ctl).parent


@contextmanager
def private_postgres(bin_dir: Path, port: int) -> Iterator[tuple[str, Callable[[], None]]]:
    """A throwaway server on 127.0.0.1:``port``: yields its database URL and a function that
    restarts it. Run as root, the server runs as the ``postgres`` user."""
    home = Path(tempfile.mkdtemp(prefix="bench-faults-pg-"))
    data, log = home / "data", home / "server.log"
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]

    def pg_ctl(*args: str) -> None:
        command = [*as_owner, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
    subprocess.run(
        [*as_owner, *initdb, "--no-sync", "--encoding=UTF8"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -k {home} -c fsync=off -c max_connections=200"
    )
    try:
        pg_ctl("-w", "-o", options, "start")
    except subprocess.CalledProcessError as error:
        shutil.rmtree(home, ignore_errors=True)
        raise SystemExit(
            f"the drill's PostgreSQL did not start on port {port} (try --port): {error.stderr}"
        ) from error
    try:
        yield (
            f"postgres://postgres@127.0.0.1:{port}/ratequeue_faults",
            lambda: pg_ctl("-w", "-m", "fast", "restart"),
        )
    finally:
        with suppress(subprocess.SubprocessError):
            pg_ctl("-w", "-m", "immediate", "stop")
        shutil.rmtree(home, ignore_errors=True)


# -- the command -------------------------------------------------------------------------


# The drill's faults, in their order (``--faults``).
FAULTS = ["restart", "kill-loop", "kill-worker", "kill-idle", "poison-exit", "poison-retry"]


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=2000, help="jobs of the load")
    parser.add_argument("--rate", type=float, default=20.0, help="enqueues per second")
    parser.add_argument("--workers", type=int, default=6, help="the qcluster's workers")
    parser.add_argument("--port", type=int, default=55432, help="the drill's PostgreSQL port")
    parser.add_argument("--pg-bin", help="directory of initdb and pg_ctl")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"the faults, in order, among {', '.join([*FAULTS, 'terminate'])} "
        "(terminate: pg_terminate_backend of every connection, as the CI test does)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 400 jobs")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs = 400
    args.faults = args.faults.split(",")
    if unknown := set(args.faults) - {*FAULTS, "terminate"}:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    if args.jobs < 1 or not 0 < args.rate <= 1000 or args.workers < 2:
        parser.error("--jobs and --rate must be positive, --rate at most 1000, --workers >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    with private_postgres(postgres_bin(args.pg_bin), args.port) as (url, restart):
        os.environ["DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        os.environ["BENCH_RATEQUEUE"] = json.dumps(SETTINGS)
        os.environ["BENCH_WORKERS"] = str(args.workers)
        drill_with(args, restart, argv)


def drill_with(
    args: argparse.Namespace, restart: Callable[[], None], argv: Sequence[str] | None
) -> None:
    from bench.harness import Workers, terminate

    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    from bench.common import machine_lines, prepare_database

    database = prepare_database()
    command = " ".join(["python -m bench.faults", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"command: {command}",
                f"load: {args.jobs:,} jobs at {args.rate:g}/s, 20-80 ms each; "
                f"RATEQUEUE {json.dumps(SETTINGS)}; {args.workers} workers; ratequeue's "
                "timings at their defaults",
            ]
        ),
        flush=True,
    )
    chosen = {
        "restart": RestartDatabase(restart),
        "terminate": TerminateConnections(),
        "kill-loop": KillLoop(),
        "kill-worker": KillWorker(),
        "poison-exit": PoisonExit(),
        "poison-retry": PoisonRetry(),
        "kill-idle": KillIdleWorker(),
    }
    faults = [chosen[name] for name in args.faults]
    log = Path(tempfile.mkstemp(prefix="bench-faults-", suffix=".log")[1])
    kept = Path(tempfile.gettempdir()) / "bench-faults-qcluster.log"
    kept.write_bytes(b"")
    running = [Workers([["qcluster"]], {})]

    def stop_cluster() -> None:
        with kept.open("ab") as out:
            out.write(running[0].log.read_bytes())
        running[0].kill()

    def restart_cluster() -> None:
        stop_cluster()
        running[0] = Workers([["qcluster"]], {})

    try:
        drill = Drill(
            log,
            plan(args.jobs),
            args.rate,
            lambda: group_pids(running[0].processes[0].pid),
            recovery_limit=60,
            restart_cluster=restart_cluster,
            print_progress=True,
        )
        report = drill.run(faults)
    finally:
        stop_cluster()
        log.unlink(missing_ok=True)
    print()
    print(report.table())
    print()
    print("\n".join(report.details()))
    print(f"The cluster's log: {kept}")
    print(f"Run took {time.time() - report.started:.0f} s.")


if __name__ == "__main__":
    main()

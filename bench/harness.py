"""The harness every queue benchmark shares: worker processes, the tables, a run's timeline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Whether procrastinate's database is ready (the benchmark's main() prepares it).
procrastinate_ready = False


class Workers:
    """Worker processes, each in its own process group, killed (the whole group) on exit."""

    def __init__(self, commands: Sequence[Sequence[str]], env: dict[str, str]) -> None:
        self.log = Path(tempfile.mkstemp(prefix="bench-queue-", suffix=".log")[1])
        self.started_at = time.monotonic()
        self.processes: list[subprocess.Popen[bytes]] = []
        with self.log.open("ab") as out:
            for command in commands:
                self.processes.append(
                    subprocess.Popen(
                        # ``-m module ...`` runs a module (a peer's worker), anything
                        # else is a management command.
                        [
                            sys.executable,
                            *(command if command[0] == "-m" else ["manage.py", *command]),
                        ],
                        cwd=ROOT,
                        env={**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", **env},
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"worker exited with {process.returncode}:\n{tail}")

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        self.log.unlink(missing_ok=True)


def stat_fields(pid: int | str) -> list[str] | None:
    """Return the fields of ``/proc/<pid>/stat`` after the command (state first), or None
    if the process is gone: ppid is [1], the process group [2], utime [11], stime [12]."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """Yield every live process's pid and :func:`stat_fields`."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(entry)) is not None:
            yield int(entry), fields


def group_pids(leaders: Sequence[int]) -> list[int]:
    """Every live process in the process groups that ``leaders`` lead (from /proc)."""
    return [
        pid
        for pid, fields in process_stats()
        if int(fields[2]) in leaders and fields[0] != "Z"  # fields[2]: the process group
    ]


def terminate(signum: int, frame: Any) -> None:
    """Turn SIGTERM into KeyboardInterrupt, so that every ``finally`` kills its workers."""
    raise KeyboardInterrupt


def empty_tables() -> None:
    """Empty every table a scenario writes: ours, django-q2's, django-tasks-db's, the probes."""
    from django.db import connection
    from django_q.models import OrmQ, Task
    from django_tasks_db.models import DBTaskResult

    from bench.models import JobStart
    from django_ratequeue.engine.fairness.models import TurnState
    from django_ratequeue.engine.models import (
        Attempt,
        CancelRequest,
        Job,
        LoopState,
        OutputChunk,
        RuntimeLimits,
        WorkerHeartbeat,
    )
    from django_ratequeue.plugins.rollups.models import RollupCursor

    models = [Attempt, OutputChunk, Job, CancelRequest, LoopState, WorkerHeartbeat]
    models += [TurnState, RuntimeLimits, RollupCursor]  # what LoopState held before 0024
    models += [OrmQ, Task, DBTaskResult, JobStart]
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables}")
    if procrastinate_ready:
        from bench import procrastinate_app

        procrastinate_app.empty()


def timeline() -> str:
    """Where a job's time went in the run that just ended, from our own timestamps: waiting
    for the runner after dispatch, running, and waiting for the loop to finish it; and how
    many jobs each loop step dispatched and finished."""
    from django_ratequeue.engine.models import LoopState

    to_start, running, to_finish, jobs, dispatches, finishes = attempts_of_jobs(
        """
        percentile_cont(0.5) WITHIN GROUP (ORDER BY a.started_at - a.dispatched_at),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY a.ended_at - a.started_at),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY j.finished_at - a.ended_at),
        count(*), count(DISTINCT a.dispatched_at), count(DISTINCT j.finished_at)
        """,
        "j.finished_at IS NOT NULL AND a.ended_at IS NOT NULL",
    )
    passes = LoopState.objects.values_list("generation", flat=True).first() or 0

    return (
        f"per job (medians): dispatch→start {ms(to_start)}, run {ms(running)}, "
        f"end→finished by the loop {ms(to_finish)}; {jobs} jobs in {dispatches} dispatching "
        f"and {finishes} finishing steps ({jobs / max(dispatches, 1):.1f} and "
        f"{jobs / max(finishes, 1):.1f} per step), {passes} loop passes"
    )


def attempts_of_jobs(columns: str, where: str) -> tuple[Any, ...]:
    """One row of ``columns`` over our attempts joined with their jobs (``a`` and ``j``)."""
    from django.db import connection

    from django_ratequeue.engine.models import Attempt, Job

    attempt = connection.ops.quote_name(Attempt._meta.db_table)
    job = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {attempt} a JOIN {job} j ON j.id = a.job_id WHERE {where}"
        )
        return tuple(cursor.fetchone())


def ms(interval: Any) -> str:
    return f"{interval.total_seconds() * 1000:.1f} ms" if interval is not None else "?"

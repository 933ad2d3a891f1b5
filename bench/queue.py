"""Job queue throughput and latency: django-ratequeue against django-q2, django-tasks-db and
procrastinate.

    .venv/bin/python -m bench.queue             # full run, a few minutes (1,000,000 backlog)
    .venv/bin/python -m bench.queue --quick     # smoke run
    .venv/bin/python -m bench.queue --steady    # steady traffic (bench.steady; its options)

Enqueues are timed in this process. Workers are real processes started with
``manage.py qcluster`` (ours, django-q2), ``manage.py db_worker`` (django-tasks-db) or
``python -m procrastinate worker`` (procrastinate, in a database of its own on the same
server, created with its schema at the start and dropped at the end: bench.procrastinate_app),
in their own process groups, killed after each scenario; the tables are emptied in between.
End-to-end throughput counts from the first finished job to the last, so the workers'
start-up is left out (it is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from importlib.util import find_spec
from typing import Any

from bench import harness
from bench.common import machine_lines, prepare_database, version
from bench.harness import Workers, attempts_of_jobs, empty_tables, ms, terminate, timeline

OURS, DJANGO_Q2, TASKS_DB = "ours", "django-q2", "django-tasks-db"
PROCRASTINATE = "procrastinate"
LABELS = {
    OURS: "ours (django-ratequeue)",
    DJANGO_Q2: "django-q2 alone (ORM broker)",
    TASKS_DB: "django-tasks-db",
    PROCRASTINATE: "procrastinate (own database, same server)",
}
PEERS = [DJANGO_Q2, TASKS_DB, PROCRASTINATE]
NOOP = "bench.jobs.noop"
WORKERS = 2


# -- worker processes -------------------------------------------------------------------


@contextmanager
def workers(contender: str, max_concurrency: int | None = None) -> Iterator[Workers]:
    """Two workers: ``qcluster`` (ours, django-q2 without our app), two ``db_worker`` or two
    procrastinate workers (at their default concurrency, 1 job at a time each)."""
    if contender == PROCRASTINATE:
        from bench.procrastinate_app import worker_command

        commands = [worker_command() for _ in range(WORKERS)]
        env = {}
    elif contender == TASKS_DB:
        commands = [["db_worker", "--verbosity", "0"] for _ in range(WORKERS)]
        env = {"BENCH_WITHOUT_RATEQUEUE": "1"}
    else:
        commands = [["qcluster"]]
        env = {"BENCH_WITHOUT_RATEQUEUE": "1"} if contender == DJANGO_Q2 else {}
    if max_concurrency is not None:
        env["BENCH_MAX_CONCURRENCY"] = str(max_concurrency)
    running = Workers(commands, env)
    try:
        yield running
    finally:
        running.kill()


# -- tables ------------------------------------------------------------------------------


def analyze(contender: str) -> None:
    """ANALYZE the tables ``contender`` just filled: autovacuum, which would, may be off (it
    is on the shared server), and a planner that believes a table empty picks poor plans."""
    if contender == PROCRASTINATE:
        from bench import procrastinate_app

        procrastinate_app.analyze()
        return
    from django.db import connection
    from django_q.models import OrmQ
    from django_tasks_db.models import DBTaskResult

    from django_ratequeue.engine.models import Attempt, Job

    models = {OURS: [Job, Attempt], DJANGO_Q2: [OrmQ], TASKS_DB: [DBTaskResult]}[contender]
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {tables}")


def done_counter(contender: str, **job_filter: Any) -> Callable[[], int]:
    """How many jobs finished so far, as each contender records it."""
    if contender == OURS:
        from django_ratequeue.engine.models import Job, Status

        return Job.objects.filter(status=Status.COMPLETE, **job_filter).count
    if contender == DJANGO_Q2:
        from django_q.models import OrmQ

        # A task leaves the ORM broker's table when its worker acknowledges it.
        total = OrmQ.objects.count()
        return lambda: total - OrmQ.objects.count()
    if contender == PROCRASTINATE:
        from bench.procrastinate_app import Monitor

        return Monitor().counter("noop", "succeeded")
    from django_tasks_db.models import DBTaskResult

    return DBTaskResult.objects.filter(status="SUCCESSFUL").count


# -- measurements ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    jobs: int
    seconds: float
    note: str = ""

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    def __str__(self) -> str:
        return f"{self.per_second:,.0f}/s"


@dataclass(frozen=True)
class Latency:
    samples: list[float]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    def __str__(self) -> str:
        return f"p50 {self.percentile(50) * 1000:.0f} ms, p99 {self.percentile(99) * 1000:.0f} ms"


@dataclass(frozen=True)
class StepCost:
    """The loop's step time per dispatched job (seconds, one per step), on an empty queue
    and with a backlog. Compared by their fastest steps: other work on the machine only
    ever adds time, so the minimum is the steadiest estimate; medians are shown too."""

    empty: list[float]
    loaded: list[float]

    @property
    def ratio(self) -> float:
        return min(self.loaded) / min(self.empty)

    def __str__(self) -> str:
        median_ratio = statistics.median(self.loaded) / statistics.median(self.empty)
        return (
            f"{min(self.loaded) * 1000:.2f} ms/job with the backlog, "
            f"{min(self.empty) * 1000:.2f} empty: {self.ratio:.2f}x "
            f"(medians {statistics.median(self.loaded) * 1000:.2f} and "
            f"{statistics.median(self.empty) * 1000:.2f} ms: {median_ratio:.2f}x)"
        )


@dataclass(frozen=True)
class Runs:
    """Repeated runs of one end-to-end scenario, compared by their median: a single run of
    a few seconds on two shared cores moves by ±25%."""

    runs: list[Rate]

    @property
    def per_second(self) -> float:
        return statistics.median(run.per_second for run in self.runs)

    def __str__(self) -> str:
        each = ", ".join(f"{run.per_second:,.0f}" for run in self.runs)
        return f"{self.per_second:,.0f}/s (median of {len(self.runs)} runs: {each})"


@dataclass(frozen=True)
class BacklogCost:
    """End to end with a backlog against the empty queue: the ratio of their per-job times
    (medians)."""

    empty: Runs
    loaded: Runs

    @property
    def ratio(self) -> float:
        return self.empty.per_second / self.loaded.per_second

    def __str__(self) -> str:
        return f"{self.loaded} against {self.empty} empty: {self.ratio:.2f}x per job"


Result = Rate | Runs | Latency | StepCost | BacklogCost | str  # str: n/a, or what stopped it


def enqueue_one(contender: str) -> Callable[[], object]:
    if contender == OURS:
        from bench.jobs import noop
        from django_ratequeue import enqueue

        return lambda: enqueue(noop)
    if contender == DJANGO_Q2:
        from django_q.tasks import async_task

        return lambda: async_task(NOOP)
    if contender == PROCRASTINATE:
        from bench.procrastinate_app import app, noop

        app.open()  # its synchronous pool: defer() from sync code
        return noop.defer
    from bench.tasks import noop_task

    return noop_task.enqueue


def single_enqueues(contender: str, count: int) -> Rate:
    empty_tables()
    submit = enqueue_one(contender)
    for _ in range(20):
        submit()  # warm-up: connections, imports, the loop's state row
    began = time.perf_counter()
    for _ in range(count):
        submit()
    return Rate(count, time.perf_counter() - began)


def async_enqueues(args: argparse.Namespace) -> Rate:
    from django.conf import settings
    from django.test import override_settings

    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "ENQUEUE_ASYNC_COMMIT": True}):
        return single_enqueues(OURS, args.enqueues)


def _enqueue_in_process(contender: str, count: int, start: Any, done: Any) -> None:
    """A producer process: set up Django, warm up, wait for the common start, enqueue."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    submit = enqueue_one(contender)
    for _ in range(20):
        submit()
    start.wait()
    for _ in range(count):
        submit()
    done.put(time.perf_counter())


def concurrent_enqueues(contender: str, processes: int, count: int) -> Rate:
    """``processes`` producers enqueueing ``count`` jobs each, one call per job, as the
    processes of a web server would; PostgreSQL then flushes several commits at once."""
    import multiprocessing

    empty_tables()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes + 1)
    done = context.Queue()
    producers = [
        context.Process(target=_enqueue_in_process, args=(contender, count, start, done))
        for _ in range(processes)
    ]
    for producer in producers:
        producer.start()
    try:
        start.wait(timeout=120)
        began = time.perf_counter()
        ended = max(done.get(timeout=120) for _ in producers)
    finally:
        for producer in producers:
            producer.join(timeout=10)
            if producer.is_alive():
                producer.kill()
    return Rate(processes * count, ended - began)


def bulk_enqueue(count: int) -> Rate:
    from bench.jobs import noop
    from django_ratequeue import enqueue_many

    empty_tables()
    enqueue_many(noop, [[]] * 100)  # warm-up
    began = time.perf_counter()
    enqueue_many(noop, [[]] * count)
    return Rate(count, time.perf_counter() - began)


def fill(contender: str, count: int) -> None:
    """Put ``count`` no-op jobs on the queue, in bulk where the contender can."""
    if contender == OURS:
        from bench.jobs import noop
        from django_ratequeue import enqueue_many

        enqueue_many(noop, [[]] * count)
        return
    submit = enqueue_one(contender)
    for _ in range(count):
        submit()


def run_until_done(
    contender: str,
    count: int,
    timeout: float,
    max_concurrency: int | None = None,
    **job_filter: Any,
) -> tuple[Rate, float]:
    """Start the workers and time the jobs from the first finished one to the last.

    Returns the rate and the workers' start-up (start to the first finished job)."""
    done = done_counter(contender, **job_filter)
    with workers(contender, max_concurrency) as running:
        return time_jobs(done, count, running, timeout)


def time_jobs(
    done: Callable[[], int], count: int, running: Workers, timeout: float
) -> tuple[Rate, float]:
    """Poll ``done()`` until ``count`` jobs are done; the rate from the first finished job
    to the last, and the workers' start-up (their start to the first finished job)."""
    deadline = time.monotonic() + timeout
    first: tuple[float, int] | None = None
    while (finished := done()) < count:
        now = time.monotonic()
        if finished and first is None:
            first = (now, finished)
        if now > deadline:
            raise RuntimeError(f"timed out: {finished} of {count} jobs done in {timeout:g} s")
        running.check_alive()
        time.sleep(0.01)
    end = time.monotonic()
    if first is None:  # everything finished between two looks
        first = (running.started_at, 0)
    return Rate(count - first[1], end - first[0]), first[0] - running.started_at


def end_to_end(contender: str, count: int, max_concurrency: int | None = None) -> Rate:
    empty_tables()
    fill(contender, count)
    analyze(contender)
    rate, startup = run_until_done(contender, count, 60 + count / 20, max_concurrency)
    print(f"  {contender}: workers' start-up to the first finished job {startup:.1f} s")
    if contender == OURS:
        print(f"  {timeline()}")
    return rate


def latency(contender: str, samples: int) -> Latency:
    """Sequential enqueues of a job that records its start, with the workers running."""
    from django.db import connection

    from bench.models import JobStart

    empty_tables()
    if contender == OURS:
        from bench.jobs import record_start
        from django_ratequeue import enqueue

        def submit(seq: int) -> object:
            return enqueue(record_start, args=[seq])
    else:
        from django_q.tasks import async_task

        def submit(seq: int) -> object:
            return async_task("bench.jobs.record_start", seq)

    table = connection.ops.quote_name(JobStart._meta.db_table)

    def started(seq: int, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        with connection.cursor() as cursor:
            while True:
                cursor.execute(f"SELECT started FROM {table} WHERE seq = %s", [seq])
                row = cursor.fetchone()
                if row:
                    return float(row[0])
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {seq} did not start within {timeout:g} s")
                time.sleep(0.002)

    measured: list[float] = []
    with workers(contender) as running:
        for seq in range(-5, 0):  # warm-up: workers up, imports and connections made
            submit(seq)
            started(seq, timeout=60)
        for seq in range(samples):
            running.check_alive()
            enqueued = time.time()
            submit(seq)
            measured.append(started(seq) - enqueued)
            time.sleep(0.01)  # the slot is free again: the previous job has finished
    if contender == OURS:
        print(f"  {latency_breakdown()}")
    return Latency(measured)


def latency_breakdown() -> str:
    """Where the latency went, from our timestamps: enqueue to the loop's dispatch (the
    signal, the leader's step) and dispatch to the runner's start (the signal, its claim)."""
    to_dispatch, to_dispatch_99, to_start, to_start_99 = attempts_of_jobs(
        """
        percentile_cont(0.5) WITHIN GROUP (ORDER BY a.dispatched_at - j.created_at),
        percentile_cont(0.99) WITHIN GROUP (ORDER BY a.dispatched_at - j.created_at),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY a.started_at - a.dispatched_at),
        percentile_cont(0.99) WITHIN GROUP (ORDER BY a.started_at - a.dispatched_at)
        """,
        "a.started_at IS NOT NULL AND (j.args->>0)::int >= 0  -- not the warm-up",
    )
    return (
        f"enqueue→dispatched by the loop p50 {ms(to_dispatch)}, p99 {ms(to_dispatch_99)}; "
        f"dispatched→claimed by a runner p50 {ms(to_start)}, p99 {ms(to_start_99)}"
    )


def insert_backlog(count: int) -> float:
    """Insert ``count`` WAITING no-op jobs of priority -1 with one INSERT ... SELECT; seconds."""
    from django.db import DatabaseError, connection

    from django_ratequeue.conf import ratequeue_settings
    from django_ratequeue.engine.models import Job, Status

    table = connection.ops.quote_name(Job._meta.db_table)
    retry = ratequeue_settings().DEFAULT_RETRIES.to_json()
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (id, func, args, kwargs, queue, concurrency_key, priority,
                status, start_at, created_at, attempts, retry, on_complete, owner, cost,
                cancel_requested, tokens_reserved, parent_id, error, traceback,
                exception_class_path)
            SELECT 'backlog-' || i, %s, '[]', '{{}}', 'default', '', -1,
                %s, now(), now() + i * interval '1 microsecond', 0, %s, '', '', 1,
                false, false, '', '', '', ''
            FROM generate_series(1, %s) AS i
            """,
            [NOOP, Status.WAITING.value, json.dumps(retry), count],
        )
        # As a backlog that has been there a while would be: vacuumed, analysed, checkpointed,
        # so that autovacuum and the checkpointer don't compete with the measurement.
        cursor.execute(f"VACUUM (ANALYZE) {table}")
        with suppress(DatabaseError):
            cursor.execute("CHECKPOINT")  # needs a superuser (or pg_checkpoint)
    return time.perf_counter() - began


def backlog_step_cost(backlog: int, slots: int, cycles: int) -> StepCost:
    """The loop's step time per job, empty and then with ``backlog`` jobs of priority -1
    waiting in the same queue (every dispatch reads the queue's head past them). The
    backlog stays for :func:`backlog_end_to_end`."""
    empty_tables()
    empty = step_costs(loop_cycles(slots, cycles), slots)
    empty_tables()
    seconds = insert_backlog(backlog)
    print(
        f"  inserted {backlog:,} waiting jobs in {seconds:.1f} s "
        "(one INSERT ... SELECT, then VACUUM ANALYZE and CHECKPOINT)"
    )
    loaded = step_costs(loop_cycles(slots, cycles), slots)
    forget_cycles()
    return StepCost(empty, loaded)


def forget_cycles() -> None:
    """Remove what :func:`loop_cycles` left (its jobs, attempts, tasks, the loop's state),
    keeping the backlog."""
    from django_q.models import OrmQ

    from django_ratequeue.engine.fairness.models import TurnState
    from django_ratequeue.engine.models import Attempt, Job, LoopState, RuntimeLimits
    from django_ratequeue.plugins.rollups.models import RollupCursor

    Attempt.objects.all().delete()
    Job.objects.filter(priority=0).delete()
    for loop_row in (LoopState, TurnState, RuntimeLimits, RollupCursor):
        loop_row.objects.all().delete()
    OrmQ.objects.all().delete()


def backlog_end_to_end(count: int, slots: int, repeats: int) -> Runs:
    """End to end for ``count`` jobs of priority 0 ahead of the backlog, in real workers,
    ``repeats`` times; the backlog stays for the next run."""
    from bench.jobs import noop
    from django_ratequeue import enqueue_many
    from django_ratequeue.engine.models import Job

    if not Job.objects.filter(priority=-1).exists():
        raise RuntimeError("no backlog: its insertion failed")
    runs = []
    for _ in range(repeats):
        enqueue_many(noop, [[]] * count)
        rate, startup = run_until_done(OURS, count, 60 + count / 20, slots, priority=0)
        print(
            f"  ours with backlog: {rate}, workers' start-up to the first finished job "
            f"{startup:.1f} s"
        )
        print(f"  {timeline()}")
        forget_cycles()
        runs.append(rate)
    empty_tables()
    return Runs(runs)


def end_to_end_runs(count: int, slots: int, repeats: int) -> Runs:
    """Ours end to end on an empty queue, ``repeats`` times."""
    runs = []
    for _ in range(repeats):
        runs.append(end_to_end(OURS, count, slots))
        print(f"  {runs[-1]}")
    return Runs(runs)


# -- where our time goes -------------------------------------------------------------------


def statements(action: Callable[[], object]) -> tuple[list[str], float]:
    """The SQL statements ``action`` sends (their first two words) and its duration."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        action()
        elapsed = time.perf_counter() - began
    return [" ".join(query["sql"].split()[:2]) for query in queries], elapsed


def summary(found: list[str], elapsed: float, jobs: int) -> str:
    kinds = ", ".join(f"{n} {kind}" for kind, n in Counter(found).most_common())
    return (
        f"{len(found)} statements for {jobs} job(s) ({len(found) / jobs:.2f}/job), "
        f"{elapsed * 1000:.1f} ms: {kinds}"
    )


@dataclass(frozen=True)
class Cycle:
    """One steady-state turn of the loop, run in this process: the step that finishes the
    previous batch and fills every slot again, then the runner's batch. Each part is the
    statements it sent (first two words) and its duration."""

    step: tuple[list[str], float]
    runner: tuple[list[str], float]


def runner_turn(slots: int) -> None:
    """A runner's turn with ``slots`` free slots, in this thread: one claim, the calls, one
    report (a runner's slots report together what ended together)."""
    from django_ratequeue.engine.execution import run_attempt
    from django_ratequeue.engine.runner import Runner

    runner = Runner("bench")
    runner.report([run_attempt(attempt) for attempt in runner.claim(slots)])


def loop_cycles(slots: int, cycles: int) -> list[Cycle]:
    """Run ``cycles`` turns of ``slots`` no-op jobs of priority 0 (ahead of any backlog)."""
    from django.conf import settings
    from django.db.models import F
    from django.test import override_settings

    from bench.jobs import noop
    from django_ratequeue import enqueue_many
    from django_ratequeue.engine.loop import Loop
    from django_ratequeue.engine.models import LoopState

    generation = LoopState.objects.ensure().generation + 1
    LoopState.objects.update(generation=F("generation") + 1)
    turns = []
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "MAX_CONCURRENCY": slots}):
        loop = Loop(generation)
        for turn in range(cycles + 1):
            enqueue_many(noop, [[]] * slots)
            step = statements(loop.step)
            runner = statements(partial(runner_turn, slots))
            if turn:  # the first step has nothing to finish yet
                turns.append(Cycle(step, runner))
        loop.step()
    return turns


def step_costs(cycles: list[Cycle], slots: int) -> list[float]:
    """The loop's step time per job of each cycle, in seconds."""
    return [cycle.step[1] / slots for cycle in cycles]


def profile(slots: int) -> list[str]:
    """Statements per enqueue, and per job in the loop's steady state and in the runner."""
    from bench.jobs import noop
    from django_ratequeue import enqueue, enqueue_many

    empty_tables()
    lines = []
    # The second enqueue prepares the INSERT on the server; from the third on it is steady.
    enqueue(noop)
    enqueue(noop)
    found, elapsed = statements(lambda: enqueue(noop))
    lines.append(f"enqueue: {summary(found, elapsed, 1)}")
    found, elapsed = statements(lambda: enqueue_many(noop, [[]] * 1000))
    lines.append(f"enqueue_many(1000): {summary(found, elapsed, 1000)}")
    empty_tables()
    cycle = loop_cycles(slots, 1)[0]
    lines.append(
        f"loop step finishing {slots} and starting {slots}: {summary(*cycle.step, slots)}"
    )
    lines.append(f"runner, claiming {slots}: {summary(*cycle.runner, slots)}")
    empty_tables()
    return lines


# -- the report --------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    target: str
    met: Callable[[Result], bool] | None
    results: dict[str, Result]
    anchors: str = ""


def rate_target(minimum: int) -> tuple[str, Callable[[Result], bool]]:
    return f"≥ {minimum:,}/s", lambda r: isinstance(r, Rate | Runs) and r.per_second >= minimum


def per_second(result: Result) -> float:
    """A rate's jobs per second; 0 for a result that is not one (a failed measurement)."""
    return result.per_second if isinstance(result, Rate | Runs) else 0.0


def times_peer(factor: float, *peers: Result) -> Callable[[Result], bool]:
    """Ours at least ``factor`` times the best of ``peers``' rates."""
    return lambda ours: per_second(ours) >= factor * max(per_second(p) for p in peers) > 0


def cell(result: Result, ours: Result) -> str:
    text = str(result)
    if isinstance(result, Rate) and isinstance(ours, Rate | Runs) and result is not ours:
        text += f" (ours {ours.per_second / result.per_second:.1f}x)"
    if isinstance(result, Latency) and isinstance(ours, Latency) and result is not ours:
        text += f" (ours {ours.percentile(50) / result.percentile(50):.2f}x at p50)"
    return text


def peers() -> list[str]:
    """The peers this run can measure: procrastinate only once its database is ready."""
    return [peer for peer in PEERS if peer != PROCRASTINATE or harness.procrastinate_ready]


def table(rows: Sequence[Row]) -> str:
    columns = [OURS, *PEERS]
    header = ["scenario", "target", *(LABELS[c] for c in columns), "anchors (quiet machine)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        ours = row.results.get(OURS, "—")
        target = row.target
        if row.met is not None:
            target += ": " + ("met" if row.met(ours) else "MISSED")
        missing = "not installed" if column_missing(PROCRASTINATE) else "—"
        cells = [
            cell(row.results.get(column, missing if column == PROCRASTINATE else "—"), ours)
            for column in columns
        ]
        lines.append("| " + " | ".join([row.label, target, *cells, row.anchors or "—"]) + " |")
    return "\n".join(lines)


def attempt(what: str, measure: Callable[[], Result]) -> Result:
    """Run one measurement; a failure is reported and recorded, the run goes on."""
    print(f"- {what} ...", flush=True)
    try:
        result = measure()
    except KeyboardInterrupt:
        raise
    except Exception as error:
        print(f"  failed: {error}", file=sys.stderr)
        return f"error: {str(error).splitlines()[0][:60]}"
    print(f"  {result}", flush=True)
    return result


def column_missing(contender: str) -> bool:
    """A peer whose package is missing (not one whose database is gone by the report)."""
    return contender == PROCRASTINATE and find_spec("procrastinate") is None


def prepare_procrastinate() -> str:
    """Create procrastinate's database with its schema, if procrastinate is installed."""
    if find_spec("procrastinate") is None:
        return "procrastinate: not installed (pip install -e '.[bench]')"
    from bench import procrastinate_app

    name = procrastinate_app.prepare()
    harness.procrastinate_ready = True
    return (
        f"procrastinate {version('procrastinate')}: database {name} on the same server, "
        f"{WORKERS} worker processes at its default concurrency (1)"
    )


def drop_procrastinate() -> None:
    if harness.procrastinate_ready:
        from bench import procrastinate_app

        procrastinate_app.drop()
        harness.procrastinate_ready = False


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.queue",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--enqueues", type=int, default=3000, help="single enqueues timed")
    parser.add_argument(
        "--producers", type=int, default=4, help="processes in the concurrent enqueue"
    )
    parser.add_argument("--bulk", type=int, default=20000, help="jobs in the bulk enqueue")
    parser.add_argument(
        "--jobs", type=int, default=3000, help="no-op jobs end to end (peers: at most 1,000)"
    )
    parser.add_argument("--samples", type=int, default=200, help="latency samples")
    parser.add_argument(
        "--backlog", type=int, default=1_000_000, help="jobs waiting in the backlog run"
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=100,
        help="ours' MAX_CONCURRENCY in the tuned end-to-end and backlog runs",
    )
    parser.add_argument(
        "--cycles", type=int, default=9, help="loop steps timed, empty and with the backlog"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of ours' tuned end to end, empty and with the backlog (medians compared)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run with small counts")
    parser.add_argument(
        "--enqueue-only", action="store_true", help="only the one-at-a-time enqueue scenario"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.enqueues, args.bulk, args.jobs, args.samples, args.cycles = 300, 2000, 500, 30, 5
        args.backlog = min(args.backlog, 20_000)
    counts = (args.enqueues, args.bulk, args.jobs, args.samples, args.backlog, args.cycles)
    if min(*counts, args.repeats, args.producers) < 1:
        parser.error("every count must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["--steady"]:  # the steady-traffic scenario has options of its own
        from bench.steady import main as steady

        steady(given[1:])
        return
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    from django.conf import settings

    database = prepare_database()
    peer_line = prepare_procrastinate()
    command = " ".join(["python -m bench.queue", *(sys.argv[1:] if argv is None else argv)])
    print(
        "\n".join(
            [
                *machine_lines(database),
                f"Python {platform.python_version()}, Django {version('django')}, "
                f"django-q2 {version('django-q2')}, django-tasks-db {version('django-tasks-db')}"
                f" (django-tasks {version('django-tasks')}), psycopg {version('psycopg')}",
                peer_line,
                f"Q_CLUSTER: {settings.Q_CLUSTER}",
                f"ours: MAX_CONCURRENCY {settings.RATEQUEUE['MAX_CONCURRENCY']} (default), "
                f"{args.max_concurrency} (tuned runs); "
                f"{WORKERS} workers each",
                f"command: {command}",
            ]
        ),
        flush=True,
    )
    started = time.monotonic()
    try:
        print("\nWhere our time goes (in this process, statements as Django sends them):")
        for line in profile(args.max_concurrency):
            print(f"  {line}")
        print()
        rows = measure_all(args)
    finally:
        empty_tables()
        drop_procrastinate()
    print()
    print(table(rows))
    print()
    print(
        "(nx) = ours ÷ that peer (for latency: ours' p50 ÷ the peer's, lower is better). "
        "End to end counts from the first finished job to the last; the tables are "
        "ANALYZEd after each fill (autovacuum, which would, may be off). "
        f"Run took {time.monotonic() - started:.0f} s."
    )


def measure_all(args: argparse.Namespace) -> list[Row]:
    peer_jobs = min(args.jobs, 1000)
    tuned = args.max_concurrency
    singles = {
        c: attempt(f"enqueue, {c}", lambda c=c: single_enqueues(c, args.enqueues))
        for c in (OURS, *peers())
    }
    rows = [
        Row(
            f"enqueue one at a time ({args.enqueues:,})",
            "≥ 1.5x the better peer",
            times_peer(1.5, singles[DJANGO_Q2], singles[TASKS_DB]),
            singles,
            "django-q2 746/s, django-tasks-db 202/s",
        ),
    ]
    rows.append(
        Row(
            f"enqueue one at a time ({args.enqueues:,}), ours with ENQUEUE_ASYNC_COMMIT "
            "(no wait for the WAL flush)",
            "—",
            None,
            {OURS: attempt("enqueue, ours, asynchronous commit", lambda: async_enqueues(args))},
        )
    )
    rows.append(
        Row(
            f"enqueue one at a time from {args.producers} processes "
            f"({args.producers} x {args.enqueues // args.producers:,})",
            "—",
            None,
            {
                c: attempt(
                    f"enqueue from {args.producers} processes, {c}",
                    lambda c=c: concurrent_enqueues(
                        c, args.producers, args.enqueues // args.producers
                    ),
                )
                for c in (OURS, *peers())
            },
        )
    )
    if args.enqueue_only:
        return rows
    end_to_end_peers = {
        c: attempt(f"end to end, {c}", lambda c=c: end_to_end(c, peer_jobs)) for c in peers()
    }
    rows += [
        Row(
            f"bulk enqueue ({args.bulk:,} in one call)",
            *rate_target(50000),
            {
                OURS: attempt("bulk enqueue, ours", lambda: bulk_enqueue(args.bulk)),
                DJANGO_Q2: "no bulk API",
                TASKS_DB: "no bulk API",
            },
        ),
        Row(
            f"no-op jobs end to end, {WORKERS} workers, ours at its default MAX_CONCURRENCY "
            f"(ours {args.jobs:,}, peers {peer_jobs:,})",
            "≥ 2x django-tasks-db",
            times_peer(2, end_to_end_peers[TASKS_DB]),
            {
                OURS: attempt("end to end, ours", lambda: end_to_end(OURS, args.jobs)),
                **end_to_end_peers,
            },
            "django-q2 alone 246/s, django-tasks-db 55/s",
        ),
    ]
    empty = attempt(
        f"end to end, ours, MAX_CONCURRENCY={tuned}, {args.repeats} runs",
        lambda: end_to_end_runs(args.jobs, tuned, args.repeats),
    )
    rows.append(
        Row(
            f"no-op jobs end to end, ours at MAX_CONCURRENCY={tuned} ({args.jobs:,})",
            *rate_target(3000),
            {OURS: empty},
        )
    )
    latencies = {
        c: attempt(f"latency, {c}", lambda c=c: latency(c, args.samples))
        for c in (OURS, DJANGO_Q2)
    }
    rows.append(
        Row(
            f"enqueue→start latency, free slot ({args.samples} sequential)",
            "p50 ≤ 5 ms, p99 ≤ 25 ms, p50 ≤ 0.5x django-q2's",
            lambda r: (
                isinstance(r, Latency)
                and r.percentile(50) <= 0.005
                and r.percentile(99) <= 0.025
                and isinstance(q2 := latencies[DJANGO_Q2], Latency)
                and r.percentile(50) <= 0.5 * q2.percentile(50)
            ),
            {**latencies, TASKS_DB: "not measured"},
            "Convex workpool p50 220-290 ms",
        )
    )
    step_cost = attempt(
        f"loop step cost per job, empty and with {args.backlog:,} waiting",
        lambda: backlog_step_cost(args.backlog, tuned, args.cycles),
    )
    rows.append(
        Row(
            f"loop cost per dispatched job with {args.backlog:,} waiting (this process, "
            f"fastest of {args.cycles} steps finishing and starting {tuned})",
            "≤ 1.2x the empty queue's",
            lambda r: isinstance(r, StepCost) and r.ratio <= 1.2,
            {OURS: step_cost},
        )
    )
    loaded = attempt(
        f"{args.jobs:,} jobs end to end with {args.backlog:,} waiting, {args.repeats} runs",
        lambda: backlog_end_to_end(args.jobs, tuned, args.repeats),
    )
    rows.append(
        Row(
            f"no-op jobs end to end with {args.backlog:,} waiting, ours at "
            f"MAX_CONCURRENCY={tuned} ({args.jobs:,}), per-job time against the empty queue's",
            "≤ 1.2x the empty queue's",
            lambda r: isinstance(r, BacklogCost) and r.ratio <= 1.2,
            {
                OURS: BacklogCost(empty, loaded)
                if isinstance(empty, Runs) and isinstance(loaded, Runs)
                else f"{loaded} (empty queue: {empty})"
            },
        )
    )
    return rows


if __name__ == "__main__":
    main()

"""Runners: what serves the queue on a django-q2 worker.

A runner is the django-q2 task :func:`serve`, which the loop asks for when attempts wait
and too few runners serve (:meth:`.loop.Loop.keep_runners`). It claims the dispatched
attempts of the highest priority itself, in chunks, with one UPDATE that skips rows other
runners are claiming (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite writes one at a
time); runs them; reports their outcomes with one statement that signals the loop; and
when nothing is left to claim, waits for the loop's ``WORK`` signal. It hands its worker
back to django-q2 after ``RUNNER_IDLE`` seconds without work, or at the end of its turn
(``RUNNER_TURN``), so that the cluster's other tasks get their turn too.

Only attempt ids go through the database (never client data). A claim takes attempts
nobody's yet and not ended, so an attempt that already ran or was recovered never runs
again, and each records its start time as it really starts. A job that raises
``SystemExit`` or ``KeyboardInterrupt`` fails like any other; the worker goes on.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import cache, partial
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q

from .. import clock
from ..conf import ratequeue_settings
from ..db import ServerStatement, sql_to_run
from ..exceptions import class_path
from .bulk import update_rows
from .execution import REFUSED, refusal, run_attempt
from .heartbeat import beat, mark_serving
from .models import REPORT_FIELDS, Attempt, Job, Outcome, queue_connection
from .wakeup import LOOP, WORK, Waiter, notifies, notify_clause, signal

logger = logging.getLogger(__name__)
T = TypeVar("T")


def serve() -> None:
    """The django-q2 task of a runner (:data:`.wakeup.SERVE_TASK`): claim and run attempts,
    and wait for more, until ``RUNNER_IDLE`` seconds pass without work or the turn ends.

    Through reconnects from the first statement on: this worker's connection may have
    been cut while it waited for the task (a database restart)."""
    global _chunk
    settings = ratequeue_settings()
    worker = through_reconnects(lambda: beat(force=True))
    through_reconnects(lambda: mark_serving(worker, True))
    runner = Runner(worker, _chunk)
    waiter = Waiter((WORK,))
    # Turns of different lengths, so that the runners of a cluster do not all hand their
    # workers back at the same moment.
    turn_ends = time.monotonic() + settings.RUNNER_TURN * random.uniform(0.8, 1.0)
    idle_since = time.monotonic()
    try:
        while time.monotonic() < turn_ends:
            if runner.run_next():
                idle_since = time.monotonic()
                continue
            left = min(idle_since + settings.RUNNER_IDLE, turn_ends) - time.monotonic()
            if left <= 0:
                break
            waiter.wait(left)
    finally:
        waiter.close()
        _chunk = runner.chunk

        def leave() -> None:
            mark_serving(worker, False)
            signal(LOOP)  # the loop asks for another runner if there is work

        through_reconnects(leave)


# The chunk size this worker process's last runner ended with: the next one starts there.
_chunk = 1


class Runner:
    """Claims, runs and reports attempts in chunks.

    A chunk is claimed with one UPDATE, each of its attempts records its start with a
    short one as it really starts (so that its start time is true, and known should the
    worker die), and their outcomes are reported with one statement. It doubles (up to
    ``MAX_CHUNK``) while jobs finish quickly and falls back to one attempt after a slow
    chunk, so quick jobs share their claims and reports while a slow job holds others
    back at most once in a row.
    """

    MAX_CHUNK = 32
    QUICK = 0.005

    def __init__(self, worker: str, chunk: int = 1) -> None:
        self.worker = worker
        self.chunk = chunk

    def run_next(self) -> int:
        """Claim a chunk and run it; how many attempts it ran (0: nothing to claim)."""
        claimed = self.claim()
        if not claimed:
            return 0
        return self.run_chunk(claimed)

    def drain(self) -> int:
        """Run chunks until nothing is left to claim; how many attempts ran."""
        total = 0
        while ran := self.run_next():
            total += ran
        return total

    def claim(self) -> list[Attempt]:
        """Take up to ``chunk`` dispatched attempts nobody claimed yet, the highest
        priority first, then in dispatch order: so a free worker never starts a lower
        priority while a higher one waits. One durable statement, which also starts a
        chunk of one (a slow job's claim costs no more) and, on PostgreSQL, returns what
        the attempts run. Through lost connections: claiming again also finds what a
        first try may have taken before its connection broke."""
        connection = queue_connection()
        stamp = clock.now() if self.chunk == 1 else None
        params: list[Any] = [
            self.chunk,
            self.worker,
            connection.ops.adapt_datetimefield_value(stamp),
        ]

        def take() -> list[Attempt]:
            with connection.cursor() as cursor:
                cursor.execute(_claim_sql(connection.vendor), params)
                rows = cursor.fetchall()
            if connection.vendor == "postgresql" and rows:
                return sorted(map(_claimed, rows), key=lambda a: (-a.job.priority, a.pk))
            # SQLite returns the attempts' own columns only: read the rest. What a first
            # try took before its connection broke comes back the same way: claimed by
            # us, not started, or started by that very claim.
            taken = Q(pk__in=[row[0] for row in rows]) | Q(started_at=None)
            if stamp is not None:
                taken |= Q(started_at=stamp)
            return list(
                Attempt.objects.filter(taken, worker=self.worker, ended_at=None, active=True)
                .select_related("job")
                .only(
                    "timeout",
                    "queue",
                    "started_at",
                    "job__func",
                    "job__args",
                    "job__kwargs",
                    "job__priority",
                )
                .order_by("-job__priority", "pk")
            )

        return through_reconnects(take)

    def run_chunk(self, claimed: list[Attempt]) -> int:
        """Start and run claimed attempts one after the other, report them together, and
        signal the loop; how many ran (an attempt canceled meanwhile does not start).

        Should something stop this process in the middle (a ``BaseException`` that is not
        the job's own ``SystemExit`` or ``KeyboardInterrupt``), the attempts that ran are
        reported first and the claimed ones that did not start are handed back: they wait
        again, and none of them counts as a try."""
        ran: list[Attempt] = []
        began = time.monotonic()
        try:
            for attempt in claimed:
                if attempt.started_at is not None or self.start(attempt):
                    ran.append(attempt)
                    run_attempt(attempt)
        except BaseException:
            self.report([attempt for attempt in ran if attempt.ended_at is not None])
            self.release([attempt.pk for attempt in claimed if attempt.started_at is None])
            raise
        quick = time.monotonic() - began < self.QUICK * max(len(ran), 1)
        self.chunk = min(self.chunk * 2, self.MAX_CHUNK) if quick else 1
        self.report(ran)
        return len(ran)

    def report(self, attempts: list[Attempt]) -> None:
        """Write the outcomes of attempts that ran, with their start times should a
        database crash have lost one, and signal the loop, which takes them in (through
        lost connections, see :func:`through_reconnects`).

        Should the database refuse the statement (a value that slipped past the checks
        of :mod:`.bounds`), each row is written on its own, and one it still refuses is
        written as a failure that says why: the others of the chunk are not held up, and
        no attempt stays running for good."""
        if not attempts:
            return
        try:
            through_reconnects(partial(self.write, attempts))
        except REFUSED:
            for attempt in attempts:
                try:
                    through_reconnects(partial(self.write, [attempt]))
                except REFUSED as error:
                    attempt.outcome, attempt.result = Outcome.FAILED, None
                    attempt.error, attempt.traceback = refusal(error), ""
                    attempt.exception_class_path = class_path(type(error))
                    through_reconnects(partial(self.write, [attempt]))

    def write(self, attempts: list[Attempt]) -> None:
        """Write the outcomes of ``attempts`` with one statement that signals the loop; in
        a savepoint within a transaction, which a refused statement must not abort."""
        connection = queue_connection()
        nested = connection.in_atomic_block
        with transaction.atomic(using=connection.alias) if nested else nullcontext():
            update_rows(
                Attempt,
                attempts,
                REPORT_FIELDS,
                # A recovered (superseded) attempt already ended: its late report is ignored.
                condition="t.ended_at IS NULL",
                # The loop's signal, raised by the statement itself (SQLite: none, it polls).
                returning=notify_clause(LOOP) if notifies() else "",
            )

    def start(self, attempt: Attempt) -> bool:
        """Record that a claimed attempt starts now, unless it was ended meanwhile (a
        cancel). Each attempt gets its true start time, and should this worker die, the
        attempts of its chunk that had not started are known: they are not tries. One
        short statement per job; on PostgreSQL it does not wait for the WAL flush (the
        claim, which makes the attempt ours, did; the report writes the time again)."""
        stamp = clock.now()
        connection = queue_connection()
        params = [connection.ops.adapt_datetimefield_value(stamp), attempt.pk, self.worker]
        statement = _start_statement(
            connection.vendor == "postgresql" and not connection.in_atomic_block
        )

        def take() -> int:
            with connection.cursor() as cursor:
                cursor.execute(sql_to_run(connection, statement), params)
                return cursor.rowcount

        if not through_reconnects(take):
            return False
        attempt.started_at = stamp
        return True

    def release(self, attempt_ids: list[int]) -> None:
        """Hand back claimed attempts that did not start, for another runner (or the
        loop's recovery, see :func:`.transitions.recover`) to take."""
        Attempt.objects.filter(
            pk__in=attempt_ids, worker=self.worker, started_at=None, ended_at=None
        ).update(worker="")


@cache
def _start_statement(async_commit: bool) -> ServerStatement:
    """The start of a claimed attempt, in plain SQL, prepared on the server from a
    session's second use (see :mod:`django_ratequeue.db`): the ORM, and planning the
    statement each time, would cost more than running it."""
    table = queue_connection().ops.quote_name(Attempt._meta.db_table)
    text = "UPDATE {} SET started_at = {} WHERE id = {} AND worker = {} AND ended_at IS NULL{}"
    relax = " RETURNING set_config('synchronous_commit', 'off', true)" if async_commit else ""
    return ServerStatement(
        name=f"ratequeue_start_attempt{'_async' if async_commit else ''}",
        text=text.format(table, "%s", "%s", "%s", relax),
        prepared_text=text.format(table, "$1", "$2", "$3", relax),
        arguments="%s, %s, %s",
    )


@cache
def _claim_sql(vendor: str) -> str:
    """The claim of up to n dispatched attempts nobody's yet, by priority then dispatch
    order, for worker w, started at s if not None (parameters: n, w, s); remote attempts
    are left to remote workers. The candidates are picked once, in a CTE (a subquery
    under ``IN`` may be run again per row, and pick more than n). On PostgreSQL, rows
    another runner is claiming at the same moment are skipped, not waited for, and the
    statement returns what the attempts are to run."""
    connection = queue_connection()
    attempts = connection.ops.quote_name(Attempt._meta.db_table)
    jobs = connection.ops.quote_name(Job._meta.db_table)
    postgresql = vendor == "postgresql"
    lock = " FOR UPDATE OF a SKIP LOCKED" if postgresql else ""
    returning = f"{attempts}.id"
    source = "picked"
    where = f"{attempts}.id = picked.id"
    if postgresql:
        returning += f", {', '.join(f'{attempts}.{c}' for c in CLAIMED_ATTEMPT)}"
        returning += f", {', '.join(f'j.{c}' for c in CLAIMED_JOB)}"
        source += f", {jobs} j"
        where += f" AND j.id = {attempts}.job_id"
    return (
        f"WITH picked AS{' MATERIALIZED' if postgresql else ''} ("
        f"SELECT a.id FROM {attempts} a JOIN {jobs} j ON j.id = a.job_id"
        f" WHERE a.active AND NOT a.remote AND a.worker = '' AND a.ended_at IS NULL"
        f" ORDER BY j.priority DESC, a.id LIMIT %s{lock}"
        f") UPDATE {attempts} SET worker = %s, started_at = %s FROM {source}"
        f" WHERE {where} AND {attempts}.worker = '' AND {attempts}.ended_at IS NULL"
        f" RETURNING {returning}"
    )


# The columns a PostgreSQL claim returns, after the attempt's id.
CLAIMED_ATTEMPT = ("job_id", "timeout", "queue", "started_at")
CLAIMED_JOB = ("func", "args", "kwargs", "priority")


def _claimed(row: tuple[Any, ...]) -> Attempt:
    """An attempt as a PostgreSQL claim returned it, with the part of its job it runs."""
    values = dict(zip(("id", *CLAIMED_ATTEMPT), row, strict=False))
    job_values = dict(zip(CLAIMED_JOB, row[1 + len(CLAIMED_ATTEMPT) :], strict=True))
    for name in ("args", "kwargs"):  # JSON text, as Django's psycopg backend reads it
        if isinstance(job_values[name], str):
            job_values[name] = json.loads(job_values[name])
    attempt = Attempt(**values)
    attempt.job = Job(id=values["job_id"], **job_values)
    return attempt


def through_reconnects(action: Callable[[], T]) -> T:
    """Run ``action``, which may be repeated, until it gets through: after a lost database
    connection (a restart) on a new one. A claim or a report must not be dropped while
    this worker lives, since nobody else would end those attempts (recovery waits for dead
    workers and timeouts). Should the database stay away, django-q2's timeout ends this
    worker, and recovery then takes its attempts as lost."""
    pause = 0.05
    connection = queue_connection()
    while True:
        try:
            return action()
        except (OperationalError, InterfaceError):
            if connection.in_atomic_block:
                raise
            logger.warning("Lost the database connection; trying again", exc_info=True)
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

"""Count each consume's result (allowed, reserved, refused) without a statement per decision.

A process adds its results up in memory and writes them to
:class:`~.models.RateLimitDecisionTotal` at most every :data:`FLUSH_EVERY` seconds, in
one UPSERT that adds to the stored counts, and as it exits normally (:func:`write_at_exit`:
``atexit``, and a django-q2 worker process's stop, which skips ``atexit``). A decision
made inside a transaction counts when that transaction commits (a rolled-back consume
took nothing). A killed process (``kill -9``, or a signal it does not handle) loses what
it had not written yet: at most its last ``FLUSH_EVERY`` seconds of decisions.
docs/metrics.md tells how the counts are exported.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import Counter
from functools import partial

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.ratelimit.algebra import Decision
from django_ratequeue.ratelimit.models import RateLimitDecisionTotal
from django_ratequeue.ratelimit.storage import rate_limit_db

# Seconds between two writes of one process's counts.
FLUSH_EVERY = 5.0

Result = RateLimitDecisionTotal.Result

logger = logging.getLogger(__name__)


def result_of(decision: Decision) -> Result:
    """Name what a consume did: admitted now, admitted by reserving, or refused."""
    if not decision.ok:
        return Result.REFUSED
    return Result.ALLOWED if decision.retry_at is None else Result.RESERVED


class DecisionTally:
    """One process's counts not yet written, by (limit name, result)."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Start from nothing (a forked child must not write its parent's counts again)."""
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._written_at = time.monotonic()
        # The database the counts were decided on (its NAME): a test database, say.
        self._database: object = None

    def add(self, name: str, result: str, database: object = None) -> None:
        """Count one decision made on ``database`` (the NAME of its connection's settings);
        write the counts if the last write is old enough."""
        with self._lock:
            self._counts[name, result] += 1
            self._database = database
            due = time.monotonic() - self._written_at >= FLUSH_EVERY
        if due:
            self.write()

    def pending(self) -> bool:
        """Say whether some counts are not written yet."""
        with self._lock:
            return bool(self._counts)

    def write(self) -> None:
        """Add the counts to the stored totals; keep them for the next write if that fails.

        Never inside a transaction, which a caller could roll back: the next decision
        made outside one writes. A failure is logged, never raised to the decision."""
        connection = connections[rate_limit_db()]
        if connection.in_atomic_block:
            return
        with self._lock:
            counts, self._counts = self._counts, Counter()
            self._written_at = time.monotonic()
            database = self._database
        if not counts or database not in (None, connection.settings_dict.get("NAME")):
            return  # decided on a database that is gone (a test run's, destroyed)
        try:
            _add_to_totals(connection, counts)
        except DatabaseError:
            logger.warning("Could not write the rate-limit decision counts", exc_info=True)
            with self._lock:
                self._counts.update(counts)


def _add_to_totals(connection: BaseDatabaseWrapper, counts: Counter[tuple[str, str]]) -> None:
    """Add ``counts`` to their rows in one UPSERT, creating the rows not there yet."""
    q = connection.ops.quote_name
    table, count = q(RateLimitDecisionTotal._meta.db_table), q("count")
    values = ", ".join(["(%s, %s, %s)"] * len(counts))
    statement = (
        f"INSERT INTO {table} (name, result, {count}) VALUES {values} "
        f"ON CONFLICT (name, result) DO UPDATE SET {count} = {table}.{count} + EXCLUDED.{count}"
    )
    params = [part for (name, result), n in sorted(counts.items()) for part in (name, result, n)]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


TALLY = DecisionTally()
os.register_at_fork(after_in_child=TALLY.forget)


def write_at_exit() -> None:
    """Write the counts not written yet, as the process exits: never raise.

    The database may be gone by then, or the settings never read: that is logged."""
    try:
        if TALLY.pending():
            TALLY.write()
    except Exception:
        logger.warning("Could not write the rate-limit decision counts at exit", exc_info=True)


atexit.register(write_at_exit)


def count_decision(connection: BaseDatabaseWrapper, name: str, decision: Decision) -> None:
    """Count ``decision`` of the limit ``name``, made on ``connection``, once its
    transaction (if any) commits."""
    result = result_of(decision)
    database = connection.settings_dict.get("NAME")
    if connection.in_atomic_block:
        add = partial(TALLY.add, name, result, database)
        transaction.on_commit(add, using=connection.alias)
    else:
        TALLY.add(name, result, database)


def decision_totals() -> list[tuple[str, str, int]]:
    """Return (name, result, count) of every limit's decisions: this process's written first."""
    TALLY.write()
    rows = RateLimitDecisionTotal.objects.using(rate_limit_db()).order_by("name", "result")
    return list(rows.values_list("name", "result", "count"))

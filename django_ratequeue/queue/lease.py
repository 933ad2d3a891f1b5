"""The leader's lease on the loop, renewed by the first statement of every step."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..db import execute, server_statement
from .deferred import aware, deferred_heads
from .models import DEFERRED_STATUSES, CancelRequest, LoopState, Schedule, queue_connection
from .rollups import ARRIVALS_WINDOW, counted_arrivals, settled_until
from .wakeup import lease_end

# What a step's transaction tells PostgreSQL (docs/concepts.md, "The main loop"):
# commit without waiting for the WAL flush, plan every read on its index, with plain
# index scans (which mark the entries of rows gone dead as they pass), and no JIT.
STEP_SETTINGS = (
    ("synchronous_commit", "off"),
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("jit", "off"),
)


@dataclass(frozen=True)
class Renewal:
    """What a step's lease renewal read and recorded.

    It read the runtime ``MAX_CONCURRENCY``, whether cancel requests wait and the
    earliest start of a SCHEDULED or RETRYING job (None: there is none); it recorded
    that the step counts the arrivals in [``arrivals_since``, ``arrivals_until``), and
    ``arrivals_behind`` says that more are settled beyond that window."""

    max_concurrency: int | None
    cancels_waiting: bool
    next_deferred: datetime | None
    arrivals_since: datetime
    arrivals_until: datetime
    arrivals_behind: bool
    # The earliest next run of a recurring schedule (None: none will run).
    next_schedule: datetime | None = None
    # LoopState.key_limits_version: moves when keys' limits change (queue/keylimits.py).
    key_limits_version: int | None = None


class Lease:
    """Renew the lease of ``generation`` step by step, with the arrivals each step counts."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        # The jobs created before this are counted in the rollups (LoopState.arrivals_until,
        # read at the pass's first step).
        self.arrivals_until: datetime | None = None

    def renew(self, now: datetime) -> Renewal | None:
        """Renew the lease in the step's transaction; None if another process took it.

        A step counts at most ARRIVALS_WINDOW of arrivals: a loop that was down catches
        up in steps rather than in one long read."""
        since = self.arrivals_until
        if since is None:
            since = counted_arrivals() or settled_until(now)
        settled = settled_until(now)
        until = max(since, min(settled, since + ARRIVALS_WINDOW))
        read = renew_lease(self.generation, now, until)
        if read is None:
            return None
        max_concurrency, cancels_waiting, next_deferred, next_schedule, version = read
        return Renewal(
            max_concurrency,
            cancels_waiting,
            next_deferred,
            since,
            until,
            until < settled,
            next_schedule,
            version,
        )

    def committed(self, renewal: Renewal) -> None:
        """Take note that the step of ``renewal`` committed."""
        self.arrivals_until = renewal.arrivals_until


def renew_lease(
    generation: int, now: datetime, arrivals_until: datetime
) -> tuple[int | None, bool, datetime | None, datetime | None, int] | None:
    """Renew the lease of ``generation`` and record the arrivals counted until then.

    Return None if another process took the lease. The same statement reads the step's
    inputs that no row it reads anyway tells (each through an index): the runtime
    ``MAX_CONCURRENCY``, whether cancel requests wait, the earliest deferred start, the
    earliest next run of a schedule, the version of the keys' limits; and
    on PostgreSQL it applies :data:`STEP_SETTINGS` to the step's transaction."""
    connection = queue_connection()
    table = connection.ops.quote_name(LoopState._meta.db_table)
    cancels = connection.ops.quote_name(CancelRequest._meta.db_table)
    returning = [
        "max_concurrency",
        f"EXISTS (SELECT 1 FROM {cancels})",
        *(f"({deferred})" for deferred in deferred_heads()),
        f"({Schedule.objects.head_sql(connection.ops.quote_name(Schedule._meta.db_table))})",
        "key_limits_version",
    ]
    if connection.vendor == "postgresql":
        returning += [f"set_config('{name}', '{value}', true)" for name, value in STEP_SETTINGS]
    sql = (
        f"UPDATE {table} SET lease_expires_at = %s, updated_at = %s, arrivals_until = %s"
        f" WHERE id = %s AND generation = %s RETURNING {', '.join(returning)}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    params = [adapt(lease_end(now)), adapt(now), adapt(arrivals_until)]
    statement = server_statement("ratequeue_renew_lease", sql)
    rows = execute(connection, statement, [*params, LoopState.SINGLETON, generation])
    if not rows:
        return None
    max_concurrency, cancels_waiting, *starts = rows[0][: 2 + len(DEFERRED_STATUSES)]
    deferred = min((aware(start) for start in starts if start is not None), default=None)
    schedule = rows[0][2 + len(DEFERRED_STATUSES)]
    next_schedule = None if schedule is None else aware(schedule)
    version = rows[0][3 + len(DEFERRED_STATUSES)]
    return max_concurrency, bool(cancels_waiting), deferred, next_schedule, version

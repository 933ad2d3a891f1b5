"""The one clock of every process: the database server's (or, for tests, the process's own).

Every time ratequeue writes or compares comes from here: the local clock plus its offset
from the database server's, measured with one query at the first use, every
:data:`RECHECK` seconds, and at once when the local clock jumps (an NTP step).
``RATEQUEUE["CLOCK"] = "local"`` makes the process's own clock the one clock, unmeasured,
for tests (and single hosts). docs/concepts.md ("One clock") tells why; docs/testing.md how.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from django.apps import apps
from django.db import DatabaseError, connections, router

from django_ratequeue.conf import ratequeue_settings

# Seconds between two measurements of the offset; and the jump of the local clock against
# the monotonic one that makes us measure again at once.
RECHECK = 60.0
JUMP = 0.5
# The coarsest resolution of a database's clock (SQLite's 'now' has milliseconds).
RESOLUTION = 0.001

# The database's time as seconds since the epoch, by vendor (SQLite's is the local host's).
SERVER_TIME = {
    "postgresql": "SELECT extract(epoch FROM clock_timestamp())",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}

logger = logging.getLogger("django_ratequeue")


class _Offset:
    """The database clock minus ours (``seconds``), and when it was measured.

    ``checked`` is the monotonic reading of the local clock it was measured against,
    ``base`` the wall clock minus that reading (a jump of the wall clock changes it)."""

    __slots__ = ("base", "checked", "seconds")

    def __init__(self, seconds: float, base: float, checked: float) -> None:
        self.seconds, self.base, self.checked = seconds, base, checked


_offset: _Offset | None = None


def timestamp() -> float:
    """Return now, in seconds since the epoch, on the one clock.

    That is the database's clock, or this process's with ``RATEQUEUE["CLOCK"] = "local"``."""
    global _offset
    if ratequeue_settings().CLOCK == "local":
        return time.time()
    wall, steady = time.time(), time.monotonic()
    known = _offset
    if known is None or steady - known.checked > RECHECK or abs(wall - steady - known.base) > JUMP:
        known = _offset = _measure(known)
        wall = time.time()
    return wall + known.seconds


def now() -> datetime:
    """Return :func:`timestamp` as an aware UTC datetime."""
    return datetime.fromtimestamp(timestamp(), tz=UTC)


def _measure(known: _Offset | None) -> _Offset:
    """Measure the database clock's offset from ours, read between two readings of ours.

    Should the database not answer, the last offset is kept (none: the local clock) and
    measured again soon. The database is the queue's (found through the app registry:
    this module is below the models), as the router gives it."""
    connection = connections[router.db_for_write(apps.get_model("django_ratequeue", "Job"))]
    sql = SERVER_TIME.get(connection.vendor)
    before, steady = time.time(), time.monotonic()
    if sql is None:
        return _Offset(0.0, before - steady, steady)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            (server,) = cursor.fetchone()
    except DatabaseError:
        logger.warning("Could not read the database's clock; using the last offset")
        seconds = known.seconds if known is not None else 0.0
        return _Offset(seconds, before - steady, steady - RECHECK + 1.0)
    after = time.time()
    seconds = float(server) - (before + after) / 2
    if abs(seconds) <= (after - before) / 2 + RESOLUTION:
        seconds = 0.0
    return _Offset(seconds, before - steady, steady)

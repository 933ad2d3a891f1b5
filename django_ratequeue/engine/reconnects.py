"""Getting through a database blip: run a database action again on a new connection.

The one rule for a lost or refused connection (a restart, a terminated backend, a server
with ``max_connections`` reached), for the runner's claims and reports and for what a
running job calls: ``stream_output``, ``report_progress``, the wait on a subtask and the
read of its result. docs/operations.md ("The database goes away").
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError

from django_ratequeue.engine.models import queue_connection

logger = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
# How long a running job's own calls wait for the database to come back before they
# raise: longer than a restart or a burst of connections, shorter than most timeouts.
JOB_PATIENCE = 120.0
# The pause after the first failure; it doubles, up to MAX_PAUSE.
FIRST_PAUSE = 0.05
MAX_PAUSE = 2.0


def through_reconnects(action: Callable[[], T], *, patience: float | None = None) -> T:
    """Run ``action``, which may be repeated, until it gets through.

    After a lost or refused database connection it runs on a new one. Without
    ``patience`` it tries for as long as its process lives: a local claim or report must
    not be dropped while its worker lives, since nobody else would end those attempts
    (should the database stay away, django-q2's timeout ends the worker, and recovery
    then takes its attempts as lost). With ``patience`` it raises the last error once
    that many seconds have passed. Inside a transaction it raises at once: the
    transaction is lost with its connection."""
    pause = FIRST_PAUSE
    deadline = None if patience is None else time.monotonic() + patience
    connection = queue_connection()
    while True:
        try:
            return action()
        except (OperationalError, InterfaceError):
            if connection.in_atomic_block:
                raise
            if deadline is not None and time.monotonic() + pause > deadline:
                raise
            logger.warning("Lost the database connection; trying again", exc_info=True)
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)


def in_job(action: Callable[[], T]) -> T:
    """Run ``action`` for a running job: through reconnects, for up to JOB_PATIENCE seconds."""
    return through_reconnects(action, patience=JOB_PATIENCE)


def job_call(func: Callable[P, T]) -> Callable[P, T]:
    """Make ``func``, a step of a running job's call that may be repeated, run :func:`in_job`."""

    @functools.wraps(func)
    def through_blips(*args: P.args, **kwargs: P.kwargs) -> T:
        return in_job(lambda: func(*args, **kwargs))

    return through_blips

"""What ratequeue runs in each django-q2 worker process: its runner (:mod:`.runner`).

The runner has a thread of its own beside the agent (:mod:`.agent`), from the process's
start to its end: it starts on django-q2's ``post_spawn`` and stops as the process exits,
giving the jobs in its slots ``STOP_GRACE`` seconds; then the process's rate-limit decision
counts are written. docs/concepts.md ("Runners") tells why.
"""

from __future__ import annotations

import logging
import threading
from multiprocessing import util
from typing import Any

from django.db import connections
from django.dispatch import receiver
from django_q.signals import post_spawn

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.heartbeat import beat, mark_serving
from django_ratequeue.engine.protocol import through_reconnects
from django_ratequeue.engine.runner import Runner
from django_ratequeue.ratelimit.counting import write_at_exit
from django_ratequeue.signals import talk

logger = logging.getLogger("django_ratequeue.queue")

# Finalizers run from the highest priority down; Django's own have none.
STOP_PRIORITY = 10
COUNTS_PRIORITY = 5


def serve(runner: Runner, stopping: threading.Event) -> None:
    """Run the runner thread: serve until the process stops."""
    grace = ratequeue_settings().STOP_GRACE
    through_reconnects(lambda: mark_serving(runner.worker, runner.pool.size))
    try:
        runner.serve(stopping, grace)
    finally:
        runner.close()
        through_reconnects(lambda: mark_serving(runner.worker, 0))
        connections.close_all()


@receiver(post_spawn)
def start_runner(sender: Any = None, **kwargs: Any) -> None:
    """Start this worker process's runner, and stop it as the process exits."""
    talk()  # a line per job's start and end, unless LOGGING says otherwise
    runner = Runner(through_reconnects(lambda: beat(force=True)))
    stopping = threading.Event()
    thread = threading.Thread(
        target=serve, args=(runner, stopping), name="ratequeue-runner", daemon=True
    )
    thread.start()

    def stop() -> None:
        runner.stop(stopping)
        thread.join(ratequeue_settings().STOP_GRACE + 5.0)

    util.Finalize(None, stop, exitpriority=STOP_PRIORITY)
    # A worker process ends with os._exit, skipping atexit: the jobs' decisions are
    # written once its runner stopped.
    util.Finalize(None, write_at_exit, exitpriority=COUNTS_PRIORITY)

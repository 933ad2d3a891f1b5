"""What ratequeue runs in each django-q2 worker process: its runner (:mod:`.runner`), on a
thread of its own beside the agent (:mod:`.agent`), from the process's start to its end.

django-q2 sends ``post_spawn`` as a worker process starts; the runner starts then and
serves for the life of the process, so that no django-q2 task is spent on it and the
process's own thread stays free for django-q2's tasks. A worker process ends after its
cluster is told to stop (``SIGTERM`` to the main ``qcluster`` process): as it exits, the
runner claims nothing more, gives the jobs in its slots ``STOP_GRACE`` seconds, and hands
back those still running, which another worker may then claim at once.
"""

from __future__ import annotations

import logging
import threading
from multiprocessing import util
from typing import Any

from django.db import connections
from django.dispatch import receiver
from django_q.signals import post_spawn

from ..conf import ratequeue_settings
from .heartbeat import beat, mark_serving
from .protocol import through_reconnects
from .runner import Runner

logger = logging.getLogger("django_ratequeue.queue")

# Finalizers run from the highest priority down; Django's own have none.
STOP_PRIORITY = 10


def serve(runner: Runner, stopping: threading.Event) -> None:
    """The runner thread's body: serve until the process stops."""
    grace = ratequeue_settings().STOP_GRACE
    through_reconnects(lambda: mark_serving(runner.worker, True))
    try:
        runner.serve(stopping, grace)
    finally:
        runner.close()
        through_reconnects(lambda: mark_serving(runner.worker, False))
        connections.close_all()


@receiver(post_spawn)
def start_runner(sender: Any = None, **kwargs: Any) -> None:
    """Start this worker process's runner, and stop it as the process exits."""
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

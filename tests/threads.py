"""Run a test's contenders in threads, each with its own database connections."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def run_in_threads(contender: Callable[[], object], count: int, timeout: float = 60) -> None:
    """Run ``contender`` in ``count`` threads at once and wait for all of them.

    Each thread closes its connections when done, so the test database can be dropped."""

    def run() -> None:
        try:
            contender()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)

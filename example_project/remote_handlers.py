"""The demo's remote worker handlers: standard library only, as on a machine without
Django. scripts/demo.sh runs them with ``python -m django_ratequeue.worker``."""

from __future__ import annotations

import os
import socket
import time

from django_ratequeue.worker import handler, report_progress, stream_output


@handler("example_project.demo.jobs.on_remote_worker")
def on_remote_worker(number: int) -> str:
    for step in range(1, 4):
        stream_output(f"step {step} of 3\n")
        report_progress({"done": step, "total": 3})
        time.sleep(0.3)
    return f"{number}² = {number * number}, on {socket.gethostname()} (pid {os.getpid()})"

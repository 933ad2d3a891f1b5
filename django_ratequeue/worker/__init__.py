"""A remote worker: runs the jobs of remote queues on a machine without database access.

    RATEQUEUE_WORKER_KEY=KEY python -m django_ratequeue.worker \\
        --url https://example.com/ratequeue/ --handlers myworker.handlers \\
        [--concurrency 4] [--queues gpu ...]

(or ``--key-file PATH``; ``--key KEY`` works too, but shows the key in the process list).
It needs Python's standard library only (no Django): ``manage.py ratequeue_worker_app``
builds this package, with ``pool.py`` and ``plain.py``, into one file that runs as
``python ratequeue-worker.pyz`` with handler modules that import ``worker``.
It claims attempts over HTTP (docs/remote-workers.md), runs the handler registered for
each job's function name, and reports the outcome, several outcomes per request under load
(:class:`Worker`). While an attempt runs, a thread of its own sends its output and progress
(at most every ``REPORT_INTERVAL``) and its heartbeats, which extend its lease; a job's
``timeout`` is enforced here (the attempt fails timed out at once). When the server is
away every request is retried with exponential back-off and jitter, unchanged (reports
are idempotent), and an ended attempt's heartbeats go on until its report is answered
(its lease outlives the outage: it is not run again); a report the server fails on (a
500) is sent ``REPORT_TRIES`` times, then its attempt is reported failed, saying so. On
SIGTERM (or SIGINT) it claims nothing more, lets running attempts finish for ``--grace``
seconds, then hands the rest back so that other workers can claim them at once.

A handlers module registers functions by the job's name, as it was enqueued::

    from django_ratequeue.worker import handler, report_progress, stream_output

    @handler("myapp.jobs.transcribe")
    def transcribe(url):
        for line in run_model(url):
            stream_output(line)
        return {"done": True}

(or defines ``HANDLERS = {"myapp.jobs.transcribe": transcribe}``).

Its modules: ``handlers`` (what handler modules call), ``client`` (HTTP to the server),
``attempt`` (one claimed attempt's reports and lease), ``serving`` (:class:`Worker`, the
claim and report loops) and ``program`` (the command line). Each imports its siblings as
``django_ratequeue.worker.*`` in the package, as ``worker.*`` in the zipapp.
"""

from __future__ import annotations

# The server's side of the protocol (api/workers.py) reads AWAY_HEADER and BACKOFF_MAX here.
# Siblings are imported relatively: the package is django_ratequeue.worker when installed
# and ``worker`` in the zipapp (manage.py ratequeue_worker_app).
from .client import AWAY_HEADER, BACKOFF_MAX
from .handlers import canceled, handler, report_progress, stream_output
from .program import KEY_VARIABLE, main
from .serving import NonRetryableError

__all__ = [
    "AWAY_HEADER",
    "BACKOFF_MAX",
    "KEY_VARIABLE",
    "NonRetryableError",
    "canceled",
    "handler",
    "main",
    "report_progress",
    "stream_output",
]

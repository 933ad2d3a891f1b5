"""The benchmark's jobs registered with ratequeue (only registered jobs run).

:mod:`bench.jobs` stays free of our app, so that django-q2 alone can run the same functions;
``RATEQUEUE["JOB_MODULES"]`` in the benchmark settings imports this module at start-up, in
the benchmark's process and in its qcluster workers.
"""

from __future__ import annotations

import time

from django_ratequeue import job, stream_output

from .jobs import exit_worker, fail, noop, observed_run, record_start

# bench.http enqueues it over HTTP.
job(noop, expose=True)
job(record_start)
# bench.faults: the observed load and its poisons
job(observed_run)
job(exit_worker)
job(fail)


@job
def generate(chunks: int, pause: float, stream: bool) -> int:
    """bench.http: a model producing ``chunks`` tokens, ``pause`` seconds each (the wait on
    its provider), streaming them or not."""
    for number in range(chunks):
        time.sleep(pause)
        if stream:
            stream_output(f"token{number} ")
    return chunks

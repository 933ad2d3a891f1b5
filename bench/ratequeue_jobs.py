"""The benchmark's jobs registered with ratequeue (only registered jobs run).

:mod:`bench.jobs` stays free of our app, so that django-q2 alone can run the same functions;
``RATEQUEUE["JOB_MODULES"]`` in the benchmark settings imports this module at start-up, in
the benchmark's process and in its qcluster workers.
"""

from __future__ import annotations

import time

from bench.jobs import (
    await_on_network,
    exit_worker,
    fail,
    noop,
    observed_run,
    pause,
    record_start,
    wait_on_network,
)
from django_ratequeue import job, stream_output

# bench.http enqueues it over HTTP.
job(noop, expose=True)
job(record_start)
# bench.steady: the short job of steady traffic
job(pause)
# bench.faults: the observed load and its poisons
job(observed_run)
job(exit_worker)
job(fail)
# bench.io: the IO-bound job, sync and ``async def``. A version of ours that refuses
# ``async def`` jobs at registration leaves the second out; bench.io says why.
job(wait_on_network)
ASYNC_REFUSED = ""
try:
    job(await_on_network)
except (TypeError, ValueError) as error:
    ASYNC_REFUSED = f"{type(error).__name__}: {error}"


@job
def generate(chunks: int, pause: float, stream: bool) -> int:
    """bench.http: a model producing ``chunks`` tokens, ``pause`` seconds each (the wait on
    its provider), streaming them or not."""
    for number in range(chunks):
        time.sleep(pause)
        if stream:
            stream_output(f"token{number} ")
    return chunks


@job(retries=0)
def batch_done(outcome: dict[str, object]) -> None:
    """bench.batches: the batch's on_complete, which does nothing with its outcome."""


@job(queue="talk", retries=0, expose=True)
def talk(words: int, pause: float) -> int:
    """bench.load: a model answering over HTTP, ``words`` words ``pause`` seconds apart."""
    for number in range(words):
        time.sleep(pause)
        stream_output(f"word{number} ")
    return words

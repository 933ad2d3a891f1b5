"""The benchmark's jobs registered with ratequeue (only registered jobs run).

:mod:`bench.jobs` stays free of our app, so that django-q2 alone can run the same functions;
``RATEQUEUE["JOB_MODULES"]`` in the benchmark settings imports this module at start-up, in
the benchmark's process and in its qcluster workers.
"""

from __future__ import annotations

from django_ratequeue import job

from .jobs import exit_worker, fail, noop, observed_run, record_start

job(noop)
job(record_start)
# bench.faults: the observed load and its poisons
job(observed_run)
job(exit_worker)
job(fail)

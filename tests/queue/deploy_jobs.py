"""A job only a newer deploy knows: no RATEQUEUE["JOB_MODULES"] of the test settings names
this module, so a cluster started with them does not know it (tests/queue/test_deploys.py).

The test process imports it, as a web process of the newer deploy would."""

from django_ratequeue import job


@job
def new_job(x: int) -> int:
    return 2 * x

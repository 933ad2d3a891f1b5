"""Jobs defined where Celery and django.tasks put tasks: found at start-up like jobs.py."""

from django_ratequeue import job


@job
def tidy(x: int) -> int:
    return x + 1

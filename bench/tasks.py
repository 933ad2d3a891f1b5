"""The no-op as a django-tasks task, for django-tasks-db (django.tasks on Django 6+)."""

from __future__ import annotations

try:
    from django.tasks import task  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    from django_tasks import task


@task()
def noop_task() -> None:
    """The unit of work of the throughput runs: nothing."""

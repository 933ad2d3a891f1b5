"""Group the failed jobs not retried yet by function and exception class."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min, QuerySet

from django_ratequeue.failed import not_retried
from django_ratequeue.jobs import Status
from django_ratequeue.models import Job

# The groups a page shows at most, the most recent failures first.
MAX_GROUPS = 200


@dataclass(frozen=True)
class FailureGroup:
    """The failed jobs of one function that raised one exception class, not retried yet."""

    func: str
    exception_class_path: str  # "" for a job failed without an exception (e.g. lost)
    jobs: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None
    last_error: str

    @property
    def exception_label(self) -> str:
        """Return the exception's class name, or what ended the job without one."""
        return self.exception_class_path.rpartition(".")[2] or "(no exception)"


def first_line(error: str | None, limit: int = 500) -> str:
    """Return the first line of an error message, at most ``limit`` characters."""
    lines = (error or "").strip().splitlines()
    return lines[0][:limit] if lines else ""


def failed_jobs(func: str | None = None, exception_class_path: str | None = None) -> QuerySet[Job]:
    """Return the FAILED jobs not retried yet, of one group when both are given."""
    jobs = not_retried(Job.objects.filter(status=Status.FAILED))
    if func is not None:
        jobs = jobs.filter(func=func)
    if exception_class_path is not None:
        jobs = jobs.filter(exception_class_path=exception_class_path)
    return jobs


def failure_groups(limit: int = MAX_GROUPS) -> list[FailureGroup]:
    """Return the groups of failed jobs not retried yet, the most recent failure first."""
    rows = (
        failed_jobs()
        .values("func", "exception_class_path")
        .annotate(jobs=Count("pk"), first=Min("finished_at"), last=Max("finished_at"))
        .order_by("-last", "func", "exception_class_path")[:limit]
    )
    groups = []
    for row in rows:
        latest = (
            failed_jobs(row["func"], row["exception_class_path"])
            .order_by("-finished_at")
            .values_list("error", flat=True)
            .first()
        )
        groups.append(
            FailureGroup(
                func=row["func"],
                exception_class_path=row["exception_class_path"],
                jobs=row["jobs"],
                first_failed_at=row["first"],
                last_failed_at=row["last"],
                last_error=first_line(latest),
            )
        )
    return groups

"""The jobs related to a job, for its admin page: its parent, its children, its callback.

Each read is bounded, however many jobs the table holds: the parent by primary key, the
children through the partial ``parent_id`` index, the callback through the
``created_at`` index (:func:`callback`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django_ratequeue.models import Job

# The most children listed.
CHILDREN_SHOWN = 20
# The callback is created in the step that finished the job, at its finished_at: looked
# for within this of it.
CALLBACK_WINDOW = timedelta(seconds=1)
# What the page shows of a related job.
SHOWN_FIELDS = ("id", "func", "status", "created_at")


@dataclass
class Related:
    """A job's relatives as the page shows them."""

    parent: Job | None = None
    # The parent's id when it is gone (pruned after RETENTION).
    missing_parent: str = ""
    children: list[Job] = field(default_factory=list)
    # More children exist than CHILDREN_SHOWN.
    more_children: bool = False
    callback: Job | None = None
    # The job whose on_complete this job is.
    reports_on: Job | None = None


def children(job: Job) -> tuple[list[Job], bool]:
    """Return up to CHILDREN_SHOWN children of ``job``, oldest first, and whether more exist."""
    found = list(
        Job.objects.filter(parent_id=job.pk)
        .exclude(parent_id="")  # the partial index's condition, so that it serves the read
        .only(*SHOWN_FIELDS)
        .order_by("created_at")[: CHILDREN_SHOWN + 1]
    )
    return found[:CHILDREN_SHOWN], len(found) > CHILDREN_SHOWN


def callback(job: Job) -> Job | None:
    """Return the ``on_complete`` job the loop created when ``job`` finished, if any.

    The loop creates it in the step that finished the job
    (:func:`..queue.transitions.create_callbacks`), with ``created_at`` equal to the
    job's ``finished_at``, and names the job in its one argument: it is found through
    the ``created_at`` index, among the jobs created in that second."""
    if not job.on_complete or job.finished_at is None:
        return None
    return (
        Job.objects.filter(
            created_at__gte=job.finished_at,
            created_at__lte=job.finished_at + CALLBACK_WINDOW,
            func=job.on_complete,
            args__0__job_id=job.pk,
        )
        .only(*SHOWN_FIELDS)
        .first()
    )


def reports_on(job: Job) -> Job | None:
    """Return the job whose ``on_complete`` call ``job`` is, if any.

    Its one argument is that job's outcome (``{"job_id": ..., "status": ...}``) and that
    job names ``job``'s function."""
    args = job.args
    if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], dict)):
        return None
    outcome = args[0]
    if not isinstance(outcome.get("job_id"), str) or "status" not in outcome:
        return None
    return (
        Job.objects.filter(pk=outcome["job_id"], on_complete=job.func).only(*SHOWN_FIELDS).first()
    )


def related(job: Job) -> Related:
    found = Related(callback=callback(job), reports_on=reports_on(job))
    if job.parent_id:
        found.parent = Job.objects.only(*SHOWN_FIELDS).filter(pk=job.parent_id).first()
        if found.parent is None:
            found.missing_parent = job.parent_id
    if job.attempts:  # a job that never ran enqueued nothing
        found.children, found.more_children = children(job)
    return found

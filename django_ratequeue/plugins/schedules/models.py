"""The recurring schedules: each declaration, its runtime edits, and where its runs are."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models

from django_ratequeue.engine.heads import LeaseHead, earliest, register_lease_head
from django_ratequeue.plugins.schedules.declarations import MISFIRE_POLICIES, NAME_MAX_LENGTH
from django_ratequeue.plugins.schedules.recurrence import Recurrence, parsed

MISFIRE_CHOICES = [
    ("skip", "skip: missed runs are skipped (and counted)"),
    ("once", "once: the latest missed run runs once, the others are skipped"),
    ("all", "all: missed runs run, the latest 100 at most, the others are skipped"),
]
assert [choice for choice, _label in MISFIRE_CHOICES] == list(MISFIRE_POLICIES)


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    """Read the due schedules through their index, and advance one with a conditional UPDATE."""

    def due(self, now: datetime) -> ScheduleQuerySet:
        """Return the schedules with a run due by ``now``, the earliest first."""
        return self.filter(next_run_at__lte=now).order_by("next_run_at")

    @staticmethod
    def head_sql(table: str) -> str:
        """Return the SQL that reads the earliest next run (by the index), ``table`` quoted."""
        return (
            f"SELECT next_run_at FROM {table} WHERE next_run_at IS NOT NULL "
            "ORDER BY next_run_at LIMIT 1"
        )

    def advance(self, name: str, seen: datetime, **changes: Any) -> bool:
        """Apply ``changes`` to schedule ``name`` if its next run is still ``seen``.

        Of two contenders that read the same next run, one wins: the other changes
        nothing and must not enqueue."""
        return bool(self.filter(pk=name, next_run_at=seen).update(**changes))


class Schedule(models.Model):
    """One recurring schedule: its declaration, its runtime state and its edits.

    Rows are written by the loop's sync of the declarations (``RATEQUEUE["SCHEDULES"]``,
    ``@job(schedule=...)``), by the loop as it enqueues runs, and by people (pause,
    resume, run now, another expression). ``next_run_at`` is NULL when the schedule is
    paused or no longer declared: the index then holds exactly the schedules to run."""

    name = models.CharField(primary_key=True, max_length=NAME_MAX_LENGTH)
    source = models.CharField(max_length=10, help_text="Declared in code (@job) or settings.")
    function = models.CharField(max_length=255)
    # The recurrence in effect: the declared one, or the admin's edit of it.
    cron = models.CharField(max_length=200, blank=True, default="")
    every = models.FloatField(null=True, blank=True, help_text="Seconds between runs.")
    timezone = models.CharField(max_length=64, default="UTC")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    options = models.JSONField(default=dict, blank=True)
    misfire = models.CharField(max_length=4, choices=MISFIRE_CHOICES, default="skip")
    # The declaration as last synced: a change of it replaces the admin's edit.
    declaration = models.JSONField(default=dict)
    # When someone last changed the recurrence in the admin (None: as declared).
    edited_at = models.DateTimeField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    # When it stopped being declared (it then never runs; declared again, it resumes).
    removed_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    # The scheduled time of the last run enqueued, and its job.
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.CharField(max_length=200, blank=True, default="")
    runs = models.PositiveBigIntegerField(default=0, help_text="Runs enqueued.")
    # Runs not enqueued (a misfire policy, or an enqueue that failed), and the last.
    skipped = models.PositiveBigIntegerField(default=0)
    last_skipped_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        verbose_name = "schedule"
        indexes = [
            models.Index(
                fields=["next_run_at"],
                condition=models.Q(next_run_at__isnull=False),
                name="ratequeue_schedule_due",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def recurrence(self) -> Recurrence:
        """The recurrence in effect (raise ValueError if a bad edit got stored)."""
        return parsed(self.cron or None, self.every, self.timezone)


# The earliest next run of a recurring schedule (None: none will run).
register_lease_head(
    LeaseHead(
        "next_schedule",
        lambda connection: [
            Schedule.objects.head_sql(connection.ops.quote_name(Schedule._meta.db_table))
        ],
        earliest,
    )
)

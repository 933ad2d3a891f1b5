"""The admin for recurring schedules: their next and last runs, pause, resume, run now, edit.

Schedules are declared in code or settings (docs/schedules.md), so none is added here;
the recurrence can be changed, and the change stands until the declaration changes."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_ratequeue import clock
from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.admin.display import moment
from django_ratequeue.admin.objectids import StorableIdsMixin
from django_ratequeue.exceptions import RateQueueError
from django_ratequeue.plugins.schedules.models import MISFIRE_CHOICES, Schedule
from django_ratequeue.plugins.schedules.recurrence import Recurrence
from django_ratequeue.plugins.schedules.runs import (
    change_recurrence,
    pause_schedule,
    resume_schedule,
    run_now,
)

MISFIRE_LABELS = dict(MISFIRE_CHOICES)


class ScheduleForm(forms.ModelForm):
    """Change a schedule's recurrence: a cron expression in a zone, or seconds between runs."""

    class Meta:
        model = Schedule
        fields = ["cron", "every", "timezone"]
        help_texts = {
            "cron": "Five fields: minute hour day-of-month month day-of-week, e.g. 0 3 * * *. "
            "Leave empty for an interval.",
            "timezone": "The IANA zone the cron expression is read in, e.g. Europe/Paris.",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data["recurrence"] = Recurrence.parse(
                data.get("cron") or None, data.get("every"), data.get("timezone") or "UTC"
            )
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        return data


@admin.register(Schedule)
class ScheduleAdmin(StorableIdsMixin, PermittedActionsMixin, admin.ModelAdmin):
    form = ScheduleForm
    list_display = [
        "name",
        "recurrence_shown",
        "next_run",
        "last_run",
        "state",
        "misfire_short",
        "runs",
        "skipped_shown",
    ]
    list_filter = ["paused", "source", "misfire"]
    search_fields = ["name", "function"]
    ordering = ["next_run_at", "name"]
    readonly_fields = [
        "name",
        "source",
        "function",
        "args",
        "kwargs",
        "options",
        "misfire_shown",
        "declaration",
        "edited_at",
        "state",
        "next_run_at",
        "last_run_at",
        "last_job_id",
        "runs",
        "skipped",
        "last_skipped_at",
        "last_error",
    ]
    actions = ["pause", "resume", "run_now"]

    class Media:
        css = {"all": ["ratequeue/lists.css"]}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # declared in code or settings

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Delete only what is no longer declared (a declared one comes back at the sync)."""
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or obj.removed_at is not None)

    @admin.display(description="recurrence")
    def recurrence_shown(self, row: Schedule) -> str:
        try:
            shown = row.recurrence.describe()
        except ValueError as error:
            return f"invalid: {error}"
        return f"{shown} (edited)" if row.edited_at else shown

    @admin.display(description="state")
    def state(self, row: Schedule) -> str:
        if row.removed_at is not None:
            return "no longer declared"
        return "paused" if row.paused else "running"

    @admin.display(description="misfire policy", ordering="misfire")
    def misfire_shown(self, row: Schedule) -> str:
        return MISFIRE_LABELS.get(row.misfire, row.misfire)

    @admin.display(description="misfire", ordering="misfire")
    def misfire_short(self, row: Schedule) -> SafeString:
        """Show the policy's name, its meaning in the tooltip."""
        return format_html('<span title="{}">{}</span>', self.misfire_shown(row), row.misfire)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, row: Schedule) -> SafeString | str:
        return moment(row.next_run_at)

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, row: Schedule) -> SafeString | str:
        return moment(row.last_run_at)

    @admin.display(description="skipped", ordering="skipped")
    def skipped_shown(self, row: Schedule) -> SafeString | str:
        if not row.skipped:
            return "0"
        return format_html("{} (last {})", row.skipped, moment(row.last_skipped_at))

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        """Store the new recurrence as the schedule's own, from its next run after now."""
        if not form.has_changed():
            return  # saved as it was: no edit to record
        change_recurrence(obj.pk, form.cleaned_data["recurrence"], clock.now())

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        paused = sum(pause_schedule(name) for name in queryset.values_list("pk", flat=True))
        self.message_user(request, f"Paused {paused} schedule(s).", messages.SUCCESS)

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now = clock.now()
        names = queryset.values_list("pk", flat=True)
        resumed = sum(resume_schedule(name, now) for name in names)
        self.message_user(request, f"Resumed {resumed} schedule(s).", messages.SUCCESS)

    @admin.action(
        description="Run the selected schedules now (once per minute)", permissions=["change"]
    )
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now = clock.now()
        for name in queryset.values_list("pk", flat=True):
            try:
                handle = run_now(name, now)
            except (RateQueueError, ValueError, TypeError) as error:
                self.message_user(request, f"{name}: not enqueued: {error}", messages.ERROR)
            else:
                self.message_user(request, f"{name}: enqueued job {handle.id}.", messages.SUCCESS)

"""The admin for batches: their progress, their jobs and their callback (docs/batches.md)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.admin.display import moment, shortened
from django_ratequeue.admin.jobfields import json_block, progress_bar
from django_ratequeue.admin.objectids import StorableIdsMixin
from django_ratequeue.admin.viewonly import ViewOnlyMixin
from django_ratequeue.models import FINAL_STATUSES, Job
from django_ratequeue.plugins.batches.grouping import BatchHandle, status_counts
from django_ratequeue.plugins.batches.models import Batch, batch_jobs

# The most jobs a batch's page lists.
JOBS_SHOWN = 50


def job_link(job_id: str, text: str = "") -> SafeString:
    """Return a link to the admin page of job ``job_id``."""
    url = reverse("admin:django_ratequeue_job_change", args=[job_id])
    return format_html('<a href="{}" class="rq-job-link">{}</a>', url, text or job_id)


def batch_link(batch_id: str) -> SafeString:
    """Return a link to the admin page of batch ``batch_id``."""
    url = reverse("admin:django_ratequeue_batch_change", args=[batch_id])
    return format_html('<a href="{}">{}</a>', url, batch_id)


@admin.register(Batch)
class BatchAdmin(StorableIdsMixin, PermittedActionsMixin, ViewOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "owner", "callback_name", "shown_created", "short_state", "total"]
    search_fields = ["id", "owner"]
    ordering = ["-created_at"]
    show_full_result_count = False
    actions = ["cancel_selected"]
    fieldsets = [
        (None, {"fields": ["id", "owner", "state", "batch_progress", "counts"]}),
        ("Jobs", {"fields": ["batch_jobs"]}),
        ("Completion callback", {"fields": ["on_complete", "callback", "shown_context"]}),
        ("When", {"fields": ["created_at", "sealed_at", "canceled_at", "finished_at"]}),
    ]
    readonly_fields = [
        "state",
        "batch_progress",
        "counts",
        "batch_jobs",
        "callback",
        "shown_context",
    ]

    class Media:
        css = {"all": ["ratequeue/jobpage.css", "ratequeue/lists.css"]}

    @admin.display(description="on complete")
    def callback_name(self, batch: Batch) -> SafeString | str:
        return shortened(batch.on_complete, batch.on_complete.rpartition(".")[2]) or "-"

    @admin.display(description="state")
    def short_state(self, batch: Batch) -> str:
        word = "finished" if batch.finished_at else "sealed" if batch.sealed_at else "open"
        return word + (" (canceled)" if batch.canceled_at is not None else "")

    @admin.display(description="created", ordering="created_at")
    def shown_created(self, batch: Batch) -> SafeString | str:
        return moment(batch.created_at)

    @admin.display(description="state")
    def state(self, batch: Batch) -> str:
        """Say where the batch is: open, sealed (its jobs run), finished; canceled or not."""
        if batch.finished_at is not None:
            word = "finished"
        elif batch.sealed_at is not None:
            word = "sealed: its jobs are running"
        else:
            word = "open: jobs are being added"
        return word + (" (canceled)" if batch.canceled_at is not None else "")

    @admin.display(description="progress")
    def batch_progress(self, batch: Batch) -> SafeString:
        counts = status_counts(batch.pk)
        done = sum(counts[status] for status in FINAL_STATUSES)
        total = sum(counts.values())
        if not total:
            return SafeString("no jobs")
        return progress_bar({"done": done, "total": total})

    @admin.display(description="jobs by status")
    def counts(self, batch: Batch) -> SafeString:
        counts = status_counts(batch.pk)
        return format_html_join(
            ", ", "{} {}", ((n, status.label.lower()) for status, n in counts.items() if n)
        )

    @admin.display(description="jobs")
    def batch_jobs(self, batch: Batch) -> SafeString:
        rows = list(
            batch_jobs(batch.pk)
            .order_by("created_at", "pk")
            .only("id", "func", "status")[: JOBS_SHOWN + 1]
        )
        if not rows:
            return SafeString("-")
        items = format_html_join(
            "",
            "<li>{} {} ({})</li>",
            (
                (job_link(job.pk), job.func, job.get_status_display().lower())
                for job in rows[:JOBS_SHOWN]
            ),
        )
        more = format_html('<p class="help">Only the first {} are listed.</p>', JOBS_SHOWN)
        return format_html("<ul>{}</ul>{}", items, more if len(rows) > JOBS_SHOWN else "")

    @admin.display(description="callback job")
    def callback(self, batch: Batch) -> SafeString | str:
        if batch.callback_id:
            if Job.objects.filter(pk=batch.callback_id).exists():
                return job_link(batch.callback_id)
            return f"{batch.callback_id} (no longer kept: pruned after RETENTION)"
        if batch.on_complete:
            return f"{batch.on_complete} runs once every job of the batch has ended"
        return "-"

    @admin.display(description="context")
    def shown_context(self, batch: Batch) -> SafeString:
        return json_block(batch.context)

    @admin.action(description="Cancel the jobs of the selected batches", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        batches = list(queryset.filter(finished_at=None).values_list("id", "owner"))
        for batch_id, owner in batches:  # staff act for every owner
            BatchHandle(batch_id, owner=owner or None).cancel()
        self.message_user(
            request, f"Asked to cancel the jobs of {len(batches)} batch(es).", messages.SUCCESS
        )

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_ratequeue.change_job")

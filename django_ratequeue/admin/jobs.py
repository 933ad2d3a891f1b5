"""The admin for jobs: what is queued, running, retrying and failed, and why.

Jobs are never edited by hand: the page offers what the public API offers, cancel and
retry (a copy, once: admin/jobcontrols.py). docs/concepts.md ("Jobs and their
statuses") tells why; docs/admin.md ("The job page") what the page shows.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.contrib.admin.utils import display_for_field
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Field, Sum
from django.db.models.functions import Length
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.defaultfilters import linebreaksbr
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString

from django_ratequeue import clock
from django_ratequeue.admin import attemptwords, dashboard, failed, related, timeline
from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.admin.jobcontrols import JobControls
from django_ratequeue.admin.jobfields import (
    JobPageFields,
    describe_retry,
    json_block,
    progress_bar,
    run_seconds,
    time_of_day,
    without_own_frames,
)
from django_ratequeue.admin.joblist import (
    LIST_DISPLAY,
    CappedCountPaginator,
    ConcurrencyKeyFilter,
    JobListColumns,
    QueueFilter,
)
from django_ratequeue.admin.objectids import StorableIdsMixin
from django_ratequeue.jobs import Handle, Retry, Status, job_note
from django_ratequeue.models import FINAL_STATUSES, Job, OutputChunk
from django_ratequeue.monitor.counts import COLUMNS
from django_ratequeue.monitor.overview import queue_overview

# A job's page shows the end of its output, this many characters at most (the output may
# be a megabyte: RATEQUEUE["MAX_OUTPUT_LENGTH"]).
OUTPUT_SHOWN = 10_000
# The fields of a job's page that its live view sends again while the job runs.
LIVE_FIELDS = (
    "status",
    "waiting_for",
    "attempts",
    "start_time",
    "finished_time",
    "cancel_asked",
    "result_value",
    "error",
    "exception_class_path",
    "formatted_traceback",
    "progress_value",
    "output_tail",
    "attempt_timeline",
    "related_jobs",
)
# Seconds the page waits before asking again: a running job changes by the second
# (PROGRESS_INTERVAL), a waiting one less often.
POLL_RUNNING = 1.0
POLL_WAITING = 2.0


@admin.register(Job)
class JobAdmin(
    JobListColumns,
    JobPageFields,
    JobControls,
    StorableIdsMixin,
    PermittedActionsMixin,
    admin.ModelAdmin,
):
    list_display = LIST_DISPLAY
    list_filter = ["status", QueueFilter, ConcurrencyKeyFilter]
    search_fields = ["id", "func"]
    ordering = ["-created_at"]
    show_full_result_count = False
    paginator = CappedCountPaginator
    change_list_template = "admin/django_ratequeue/job/change_list.html"
    change_form_template = "admin/django_ratequeue/job/change_form.html"
    actions = ["cancel_selected", "retry_selected"]

    class Media:
        css = {"all": ["ratequeue/lists.css"]}

    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "func",
                    "status",
                    "waiting_for",
                    "queue",
                    "concurrency_key",
                    "owner",
                ]
            },
        ),
        (
            "Outcome",
            {"fields": ["result_value", "error", "exception_class_path", "formatted_traceback"]},
        ),
        ("Progress and output", {"fields": ["progress_value", "output_tail"]}),
        ("Attempts", {"fields": ["attempt_timeline"]}),
        ("Related jobs", {"fields": ["related_jobs"]}),
        ("Call", {"fields": ["call_args", "call_kwargs", "priority", "cost", "timeout"]}),
        ("When", {"fields": ["created_time", "start_time", "finished_time"]}),
        ("Retries", {"fields": ["attempts", "retry_policy", "cancel_asked"]}),
        ("Completion callback", {"fields": ["on_complete", "callback_context"]}),
    ]
    readonly_fields = [
        "waiting_for",
        "call_args",
        "call_kwargs",
        "retry_policy",
        "result_value",
        "formatted_traceback",
        "callback_context",
        "attempt_timeline",
        "progress_value",
        "output_tail",
        "related_jobs",
        "created_time",
        "start_time",
        "finished_time",
        "cancel_asked",
    ]

    @admin.display(description="waiting for")
    def waiting_for(self, job: Job) -> str:
        """Say what a dispatched job waits for: a worker that knows its function, or ""."""
        if job.status != Status.RUNNING:
            return ""
        return job_note(job.pk, job.func, clock.now())

    @admin.display(description="args")
    def call_args(self, job: Job) -> SafeString:
        return json_block(job.args)

    @admin.display(description="kwargs")
    def call_kwargs(self, job: Job) -> SafeString:
        return json_block(job.kwargs)

    @admin.display(description="retry policy")
    def retry_policy(self, job: Job) -> SafeString | str:
        try:
            return describe_retry(Retry(**job.retry))
        except (TypeError, ValueError):  # a row written behind the app's back
            return json_block(job.retry)

    @admin.display(description="result")
    def result_value(self, job: Job) -> SafeString | str:
        return json_block(job.result) if job.status == Status.COMPLETE else "-"

    @admin.display(description="progress")
    def progress_value(self, job: Job) -> SafeString | str:
        """Show a bar when the progress says how far the job is, and the progress as reported."""
        if job.progress is None:
            return "-"
        return format_html("{}{}", progress_bar(job.progress), json_block(job.progress))

    @admin.display(description="output")
    def output_tail(self, job: Job) -> SafeString | str:
        """Show the end of the job's output (``stream_output``), OUTPUT_SHOWN characters at most.

        It is read from the last chunk back, as far as needed."""
        chunks = OutputChunk.objects.filter(job_id=job.id)
        total = chunks.aggregate(count=Count("index"), length=Sum(Length("text")))
        if not total["count"]:
            return "-"
        tail: list[str] = []
        size = 0
        for text in chunks.order_by("-index").values_list("text", flat=True).iterator(10):
            tail.append(text)
            size += len(text)
            if size >= OUTPUT_SHOWN:
                break
        shown = "".join(reversed(tail))[-OUTPUT_SHOWN:]
        summary = f"{total['count']} chunks, {total['length']} characters"
        if len(shown) < total["length"]:
            summary += f"; the last {len(shown)} shown"
        return format_html(
            '<div class="rq-output"><pre>{}</pre></div><div class="help">{}</div>',
            shown,
            summary,
        )

    @admin.display(description="context")
    def callback_context(self, job: Job) -> SafeString:
        return json_block(job.context)

    @admin.display(description="timeline")
    def attempt_timeline(self, job: Job) -> SafeString:
        """Show the attempts drawn (admin/timeline.py), then listed in a table.

        The table is the text alternative, with every time and error."""
        attempts = Handle(job.id, owner=job.owner).attempts()
        next_start = job.start_at if job.status == Status.RETRYING else None
        drawing = timeline.render(attempts, timezone.now(), next_start)
        rows = [
            {
                "attempt": a,
                "dispatched": time_of_day(a.dispatched_at),
                "started": time_of_day(a.started_at),
                "ended": time_of_day(a.ended_at),
                "duration": run_seconds(a),
                "outcome": attemptwords.outcome_label(a),
                "worker": attemptwords.worker_shown(a.worker, a.remote),
                "traceback": without_own_frames(a.traceback),
            }
            for a in attempts
        ]
        table = render_to_string("admin/django_ratequeue/job/attempts.html", {"rows": rows})
        if not drawing:
            return SafeString(table)
        return format_html("{}{}{}", drawing, timeline.legend(), SafeString(table))

    @admin.display(description="related")
    def related_jobs(self, job: Job) -> SafeString:
        """Show links to the job's parent, children and callback (admin/related.py)."""
        context = {"related": related.related(job), "original": job}
        return SafeString(render_to_string("admin/django_ratequeue/job/related.html", context))

    # -- read-only -----------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # finished jobs are pruned after RETENTION; the rest are canceled

    # -- the queue overview --------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        overview = path(
            "overview/",
            self.admin_site.admin_view(self.overview_view),
            name="django_ratequeue_job_overview",
        )
        live = path(
            "<path:object_id>/live/",
            self.admin_site.admin_view(self.live_view),
            name="django_ratequeue_job_live",
        )
        return [
            overview,
            *dashboard.urls(self),
            *failed.urls(self),
            *self.control_urls(),
            live,
            *super().get_urls(),
        ]

    # -- a job's own page: its buttons and its live view ---------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {
            "has_cancel_permission": self.has_cancel_permission(request),
            "has_retry_permission": self.has_retry_permission(request),
        }
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Job | None = None,
    ) -> HttpResponse:
        """Show the buttons that fit the job the page shows: the same read as its fields.

        A second read could find the loop moved it on meanwhile, and show a Canceled job
        with its Cancel button."""
        if obj is not None:
            context = {
                **context,
                "final": obj.status in FINAL_STATUSES,
                **self._buttons(request, obj),
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

    def live_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Return the parts of a job's page that change while it runs, as JSON.

        For static/ratequeue/jobpage.js: staff see every owner's job, as on the page
        itself."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        job = self.get_object(request, object_id)
        if job is None:
            raise Http404(f"There is no job {object_id!r}.")
        final = job.status in FINAL_STATUSES
        return JsonResponse(
            {
                "id": job.id,
                "status": job.status,
                "final": final,
                "progress": job.progress,
                "poll_after": POLL_RUNNING if job.status == Status.RUNNING else POLL_WAITING,
                **self._buttons(request, job),
                "fields": {name: self._field_html(job, name) for name in LIVE_FIELDS},
            }
        )

    def _field_html(self, job: Job, name: str) -> str:
        """Return a read-only field's contents as the page shows them.

        As the admin's ``AdminReadonlyField.contents`` renders a display method or a
        model field."""
        method = getattr(self, name, None)
        if callable(method):
            return str(conditional_escape(method(job)))
        field = cast("Field[Any, Any]", Job._meta.get_field(name))
        shown = display_for_field(getattr(job, name), field, self.get_empty_value_display())
        return str(linebreaksbr(shown))

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": "Queue overview",
            "opts": self.opts,
            "overview": queue_overview(),
            "columns": COLUMNS,
        }
        return TemplateResponse(request, "admin/django_ratequeue/job/overview.html", context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"overview": queue_overview(), "columns": COLUMNS}
        return super().changelist_view(request, {**context, **(extra_context or {})})

"""A job's cancel and retry: the list's actions, the page's buttons and the views they post.

A retry enqueues a copy, once (:mod:`django_ratequeue.failed`); a cancel asks the job's
handle, as its owner would. docs/admin.md ("The job page") tells what each one does.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST

from django_ratequeue.failed import RETRYABLE_STATUSES, retry
from django_ratequeue.jobs import Handle
from django_ratequeue.models import FINAL_STATUSES, Job


class JobControls(admin.ModelAdmin):
    """Cancel and retry jobs from the list's actions and from a job's own page."""

    def control_urls(self) -> list[URLPattern]:
        """Return the URLs the job page's Cancel and Retry buttons post to."""
        return [
            path(
                "<path:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name="django_ratequeue_job_cancel",
            ),
            path(
                "<path:object_id>/retry/",
                self.admin_site.admin_view(self.retry_view),
                name="django_ratequeue_job_retry",
            ),
        ]

    @admin.action(description="Cancel the selected jobs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.exclude(status__in=FINAL_STATUSES).values_list("id", "owner"))
        for job_id, owner in ids:  # staff act for every owner
            Handle(job_id, owner=owner).cancel()
        message = f"Asked to cancel {len(ids)} job(s)"
        skipped = queryset.count() - len(ids)
        if skipped:
            message += f"; {skipped} already finished job(s) left as they are"
        self.message_user(
            request,
            message + ". Waiting jobs are canceled at once, running ones when their attempt ends.",
            messages.SUCCESS,
        )

    @admin.action(
        description="Retry the selected failed or canceled jobs (as new jobs)",
        permissions=["retry"],
    )
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        copies: dict[bool, list[str]] = {True: [], False: []}
        for job in queryset.filter(status__in=RETRYABLE_STATUSES).order_by("created_at"):
            try:
                done = retry(job)
            except (TypeError, ValueError) as exc:  # e.g. its call no longer fits the function
                self.message_user(request, f"Could not retry {job.id}: {exc}", messages.ERROR)
                continue
            copies[done.enqueued].append(f"{job.id} → {done.handle.id}")
        skipped = queryset.exclude(status__in=RETRYABLE_STATUSES).count()
        if copies[True]:
            self.message_user(
                request,
                f"Enqueued {len(copies[True])} new job(s): {', '.join(copies[True])}.",
                messages.SUCCESS,
            )
        if copies[False]:
            self.message_user(
                request,
                f"Retried before, nothing enqueued: {', '.join(copies[False])}.",
                messages.WARNING,
            )
        if skipped:
            self.message_user(
                request,
                f"{skipped} selected job(s) are not failed or canceled and were not retried.",
                messages.WARNING,
            )

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_ratequeue.change_job")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_ratequeue.add_job")

    def _buttons(self, request: HttpRequest, job: Job) -> dict[str, bool]:
        """Return which of its buttons the job's page shows now.

        Both are on the page for whoever may use them; the live page shows the one that
        fits the job's status."""
        return {
            "can_cancel": job.status not in FINAL_STATUSES and self.has_cancel_permission(request),
            "can_retry": job.status in RETRYABLE_STATUSES and self.has_retry_permission(request),
        }

    def _job_page(self, job_id: str) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:django_ratequeue_job_change", args=[job_id]))

    @method_decorator(require_POST)
    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self.get_object(request, object_id)
        if job is None or not self.has_cancel_permission(request):
            raise PermissionDenied
        if job.status in FINAL_STATUSES:
            self.message_user(request, f"Job {job.id} is already {job.status}.", messages.WARNING)
        else:
            Handle(job.id, owner=job.owner).cancel()  # staff act for every owner
            self.message_user(
                request,
                f"Asked to cancel {job.id}: canceled at once if it has not started, "
                "when its attempt ends if it is running.",
                messages.SUCCESS,
            )
        return self._job_page(job.id)

    @method_decorator(require_POST)
    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self.get_object(request, object_id)
        if job is None or not self.has_retry_permission(request):
            raise PermissionDenied
        if job.status not in RETRYABLE_STATUSES:
            self.message_user(
                request,
                f"Job {job.id} is {job.status}: only failed or canceled jobs are retried.",
                messages.WARNING,
            )
            return self._job_page(job.id)
        try:
            done = retry(job)
        except (TypeError, ValueError) as exc:
            self.message_user(request, f"Could not retry {job.id}: {exc}", messages.ERROR)
            return self._job_page(job.id)
        if done.enqueued:
            message = f"Enqueued {done.handle.id}, a copy of {job.id}."
            self.message_user(request, message, messages.SUCCESS)
        else:
            message = f"{job.id} was retried before, as {done.handle.id}: nothing enqueued."
            self.message_user(request, message, messages.WARNING)
        return self._job_page(done.handle.id)

"""The admin's failed jobs: grouped by function and exception class, retried or discarded.

Retry needs the permission to add jobs, discard the one to delete them; both act on a
whole group, as it is when the form is posted, and a retry copies each job once
(:func:`django_ratequeue.failed.retry`). docs/admin.md ("Failed jobs") shows the page.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from django_ratequeue.failed import discard, retry
from django_ratequeue.jobs import check_text
from django_ratequeue.monitor.failures import failed_jobs, failure_groups

# The jobs one post retries or discards at most: a bigger group takes several posts.
MAX_PER_POST = 1000
# Longer than any function path or exception class a job stores.
MAX_NAME_LENGTH = 10_000


def urls(model_admin: admin.ModelAdmin) -> list[URLPattern]:
    """Return the failed jobs' URLs, for the job admin's ``get_urls``."""
    site = model_admin.admin_site
    return [
        path(
            "failed/",
            site.admin_view(lambda request: failed_view(model_admin, request)),
            name="django_ratequeue_job_failed",
        ),
        path(
            "failed/retry/",
            site.admin_view(require_POST(lambda request: retry_view(model_admin, request))),
            name="django_ratequeue_job_failed_retry",
        ),
        path(
            "failed/discard/",
            site.admin_view(lambda request: discard_view(model_admin, request)),
            name="django_ratequeue_job_failed_discard",
        ),
    ]


def may_retry(request: HttpRequest) -> bool:
    """Say whether the user may retry jobs (enqueue copies): the permission to add jobs."""
    return request.user.has_perm("django_ratequeue.add_job")


def may_discard(request: HttpRequest) -> bool:
    """Say whether the user may discard jobs: the permission to delete them."""
    return request.user.has_perm("django_ratequeue.delete_job")


def failed_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    """Show the groups of failed jobs not retried yet, the most recent failure first."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Failed jobs",
        "opts": model_admin.opts,
        "groups": failure_groups(),
        "may_retry": may_retry(request),
        "may_discard": may_discard(request),
    }
    return TemplateResponse(request, "admin/django_ratequeue/job/failed.html", context)


def _group(request: HttpRequest) -> tuple[str, str]:
    """Return the (function, exception class) a form names; 400 for what no row holds."""
    source = request.POST if request.method == "POST" else request.GET
    group = source.get("func", ""), source.get("exception_class_path", "")
    try:
        for name, value in zip(("func", "exception_class_path"), group, strict=True):
            check_text(name, value)
            if len(value) > MAX_NAME_LENGTH:
                raise ValueError(f"{name} is longer than any stored one.")
    except ValueError as error:
        raise BadRequest(str(error)) from None
    return group


def _back(request: HttpRequest) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("admin:django_ratequeue_job_failed"))


def retry_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    """Retry the failed jobs of one group, each once, up to MAX_PER_POST."""
    if not may_retry(request):
        raise PermissionDenied
    func, exception = _group(request)
    enqueued = already = 0
    for job in failed_jobs(func, exception).order_by("finished_at")[:MAX_PER_POST]:
        try:
            done = retry(job)
        except (TypeError, ValueError) as exc:  # e.g. its call no longer fits the function
            model_admin.message_user(request, f"Could not retry {job.pk}: {exc}", messages.ERROR)
            continue
        enqueued += done.enqueued
        already += not done.enqueued
    model_admin.message_user(
        request,
        f"Retried {enqueued} job(s) of {func} ({exception or 'no exception'})"
        + (f"; {already} had been retried already." if already else "."),
        messages.SUCCESS,
    )
    return _back(request)


def discard_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    """Ask to confirm (GET), then delete (POST) the failed jobs of one group."""
    if not may_discard(request):
        raise PermissionDenied
    func, exception = _group(request)
    jobs = failed_jobs(func, exception)
    if request.method != "POST":
        context = {
            **model_admin.admin_site.each_context(request),
            "title": "Discard failed jobs",
            "opts": model_admin.opts,
            "func": func,
            "exception_class_path": exception,
            "jobs": jobs.count(),
        }
        return TemplateResponse(request, "admin/django_ratequeue/job/failed_discard.html", context)
    ids = list(jobs.values_list("pk", flat=True)[:MAX_PER_POST])
    deleted = discard(ids)
    model_admin.message_user(
        request, f"Discarded {deleted} failed job(s) of {func}.", messages.SUCCESS
    )
    return _back(request)

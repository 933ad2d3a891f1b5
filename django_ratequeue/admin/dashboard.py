"""The admin's queue dashboard: the queues now and over the last hour or day, live.

Two views under the job admin's URLs, with its permission (view on jobs): the page, and
its body alone, which ``static/ratequeue/dashboard.js`` swaps in every few seconds.
Everything shown comes from :func:`..monitor.snapshot.snapshot`; docs/admin.md ("The
dashboard") tells what it shows, and why its row on the admin's index is a proxy model.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString

from django_ratequeue.admin.charts import Series, line_chart
from django_ratequeue.admin.viewonly import ViewOnlyMixin
from django_ratequeue.models import Job, QueueDashboard
from django_ratequeue.monitor.counts import COLUMNS
from django_ratequeue.monitor.ratelimits import KEYS_READ
from django_ratequeue.monitor.series import DEFAULT_WINDOW, WINDOWS, Window
from django_ratequeue.monitor.snapshot import QueueState, Snapshot, snapshot

# How often the page asks for a fresh body, in milliseconds, per window: a day's points
# are 15 minutes wide and cost more to read.
REFRESH_MS = {"hour": 5_000, "day": 30_000}
BODY_TEMPLATE = "admin/django_ratequeue/job/_dashboard_body.html"


@dataclass(frozen=True)
class QueueCharts:
    """A queue (or all queues together) and its four charts."""

    state: QueueState
    charts: list[SafeString]


def charts_for(state: QueueState, number: int, window: str) -> QueueCharts:
    """Return the throughput, depth, wait time and run time charts of ``state``.

    ``number`` makes the charts' ids unique in the page: a queue's name may hold
    anything."""
    span = "the last hour" if window == "hour" else "the last day"
    prefix = f"rq-chart-{number}"
    return QueueCharts(
        state, [*_flow_charts(state, prefix, span), *_time_charts(state, prefix, span)]
    )


def _flow_charts(state: QueueState, prefix: str, span: str) -> list[SafeString]:
    """Return the charts of jobs started, completed and failed, and of jobs not finished."""
    figures, depth, name = state.series, state.depth, state.name
    return [
        line_chart(
            f"{prefix}-throughput",
            f"{name}: jobs started, completed and failed per interval, {span}",
            [f.start for f in figures],
            [
                Series("started", [f.started for f in figures]),
                Series("completed", [f.completed for f in figures]),
                Series("failed", [f.failed for f in figures]),
            ],
            "count",
        ),
        line_chart(
            f"{prefix}-depth",
            f"{name}: jobs not finished and jobs running, {span}",
            [d.start for d in depth],
            [
                Series("not finished", [d.unfinished for d in depth]),
                Series("running", [d.running for d in depth]),
            ],
            "level",
        ),
    ]


def _time_charts(state: QueueState, prefix: str, span: str) -> list[SafeString]:
    """Return the charts of the wait before start and of the run time, by percentile."""
    return [
        _percentiles_chart(state, f"{prefix}-wait", "wait before start", "wait", span),
        _percentiles_chart(state, f"{prefix}-run", "run time", "run", span),
    ]


def _percentiles_chart(
    state: QueueState, chart_id: str, label: str, figure: str, span: str
) -> SafeString:
    """Return the chart of one figure's p50, p95 and p99 (``figure`` is ``wait`` or ``run``)."""
    figures = state.series
    return line_chart(
        chart_id,
        f"{state.name}: {label}, percentiles in seconds, {span}",
        [f.start for f in figures],
        [Series(p, [getattr(f, f"{figure}_{p}") for f in figures]) for p in ("p50", "p95", "p99")],
        "seconds",
    )


def body_context(data: Snapshot) -> dict[str, object]:
    by_name = {state.name: state for state in data.queues}
    return {
        "snapshot": data,
        "columns": COLUMNS,
        "total": charts_for(data.total, 0, data.window),
        "charted": [
            charts_for(by_name[name], number, data.window)
            for number, name in enumerate(data.charted, start=1)
        ],
        "not_charted": len(data.queues) - len(data.charted),
        "refresh_ms": REFRESH_MS[data.window],
        "keys_read": KEYS_READ,
    }


def _window(request: HttpRequest) -> Window | None:
    """Return the window asked for (the default if none), or None when it is not one we know."""
    asked = request.GET.get("window", DEFAULT_WINDOW)
    return asked if asked in WINDOWS else None  # type: ignore[return-value]


def _bad_window() -> HttpResponse:
    known = ", ".join(WINDOWS)
    return HttpResponseBadRequest(
        f"Unknown window: choose one of {known}.", content_type="text/plain"
    )


def dashboard_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    window = _window(request)
    if window is None:
        return _bad_window()
    data = snapshot(window)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Queue dashboard",
        "opts": model_admin.opts,
        "windows": list(WINDOWS),
        **body_context(data),
    }
    return TemplateResponse(request, "admin/django_ratequeue/job/dashboard.html", context)


def live_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    """Return the dashboard's body alone, as HTML, for the page's live refresh."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    window = _window(request)
    if window is None:
        return _bad_window()
    html = render_to_string(BODY_TEMPLATE, body_context(snapshot(window)), request)
    response = HttpResponse(html)
    response["Cache-Control"] = "no-store"
    return response


def urls(model_admin: admin.ModelAdmin) -> list[URLPattern]:
    """Return the dashboard's URLs, for the job admin's ``get_urls``."""
    site = model_admin.admin_site
    return [
        path(
            "dashboard/",
            site.admin_view(lambda request: dashboard_view(model_admin, request)),
            name="django_ratequeue_job_dashboard",
        ),
        path(
            "dashboard/live/",
            site.admin_view(lambda request: live_view(model_admin, request)),
            name="django_ratequeue_job_dashboard_live",
        ),
    ]


@admin.register(QueueDashboard)
class QueueDashboardAdmin(ViewOnlyMixin, admin.ModelAdmin):
    """Show the dashboard's row on the admin's index, for whoever may view jobs.

    Its one URL opens the dashboard."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return self.admin_site.get_model_admin(Job).has_view_permission(request)

    def get_urls(self) -> list[URLPattern]:
        opens = path(
            "",
            self.admin_site.admin_view(self.open_dashboard),
            name="django_ratequeue_queuedashboard_changelist",
        )
        return [opens]

    def open_dashboard(self, request: HttpRequest) -> HttpResponse:
        """Redirect to the dashboard (under the job admin's URLs, where it has always been)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse("admin:django_ratequeue_job_dashboard"))

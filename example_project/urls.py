from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults

from django_ratequeue.contrib.prometheus import metrics_view

API_PREFIX = "/ratequeue/"


def server_error(request: HttpRequest) -> HttpResponse:
    """Answer a 500 (DEBUG off) as JSON on the HTTP API, as its other errors are.

    Django has logged the error with its traceback (LOGGING in settings.py)."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Server error: it is in the server's log."}, status=500)
    return defaults.server_error(request)


handler500 = server_error

urlpatterns = [
    path("admin/", admin.site.urls),
    # The HTTP API (docs/http-api.md): enqueue exposed jobs, follow them, rate limits.
    path(API_PREFIX.strip("/") + "/", include("django_ratequeue.urls")),
    # Prometheus' scrape (docs/metrics.md). Open here, for the demo: behind a login, a
    # token or your ingress's rules in production.
    path("metrics", metrics_view),
    # No icon, and no 404 in the log for every page the browser shows (the admin's too).
    path("favicon.ico", lambda request: HttpResponse(status=204)),
    path("", include("example_project.demo.urls")),
]

from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path

from django_ratequeue.contrib.prometheus import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    # The HTTP API (docs/http-api.md): enqueue exposed jobs, follow them, rate limits.
    path("ratequeue/", include("django_ratequeue.urls")),
    # Prometheus' scrape (docs/metrics.md). Open here, for the demo: behind a login, a
    # token or your ingress's rules in production.
    path("metrics", metrics_view),
    # No icon, and no 404 in the log for every page the browser shows (the admin's too).
    path("favicon.ico", lambda request: HttpResponse(status=204)),
    path("", include("example_project.demo.urls")),
]

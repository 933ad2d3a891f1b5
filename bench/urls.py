"""The benchmark serves no pages but the HTTP API, for bench.http; none at all for the
peers' processes, which run without our app (``BENCH_WITHOUT_RATEQUEUE=1``)."""

from django.apps import apps
from django.urls import include, path

urlpatterns = (
    [path("ratequeue/", include("django_ratequeue.urls"))]
    if apps.is_installed("django_ratequeue")
    else []
)

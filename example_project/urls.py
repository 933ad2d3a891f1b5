from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The HTTP API (docs/http-api.md): enqueue exposed jobs, follow them, rate limits.
    path("ratequeue/", include("django_ratequeue.urls")),
    # No icon, and no 404 in the log for every page the browser shows (the admin's too).
    path("favicon.ico", lambda request: HttpResponse(status=204)),
    path("", include("example_project.demo.urls")),
]

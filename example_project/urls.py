from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # No icon, and no 404 in the log for every page the browser shows (the admin's too).
    path("favicon.ico", lambda request: HttpResponse(status=204)),
    path("", include("example_project.demo.urls")),
]

"""The benchmark serves no pages but the HTTP API, for bench.http."""

from django.urls import include, path

urlpatterns = [path("ratequeue/", include("django_ratequeue.urls"))]

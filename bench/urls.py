"""The benchmark serves no pages but the HTTP API, for bench.http (and the admin, for
bench.dashboard, when ``BENCH_ADMIN=1`` keeps it); none at all for the peers' processes,
which run without our app (``BENCH_WITHOUT_RATEQUEUE=1``).

``bench/floor/`` is bench.http's floor: a DRF view that parses the same JSON body and
answers 201 without doing anything, behind the same middleware and authentication as the
API. What an enqueue costs above it is the enqueue's own."""

from typing import Any

from django.apps import apps
from django.urls import include, path
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class Floor(APIView):
    throttle_classes: list[Any] = []

    def post(self, request: Request) -> Response:
        return Response({"function": request.data["function"]}, status=status.HTTP_201_CREATED)


urlpatterns = (
    [
        path("ratequeue/", include("django_ratequeue.urls")),
        path("bench/floor/", Floor.as_view()),
    ]
    if apps.is_installed("django_ratequeue")
    else []
)
if apps.is_installed("django.contrib.admin"):  # bench.dashboard (BENCH_ADMIN=1)
    from django.contrib import admin

    urlpatterns.append(path("admin/", admin.site.urls))

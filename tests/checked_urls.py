"""URLs whose limit names the start-up checks find undefined (tests/test_start_up_checks.py):
``@ratelimit("send_mesage")`` and a throttle scope ``"uploads"`` that no setting defines,
beside views whose names are defined."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views import View
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratequeue.contrib.drf import RateLimitThrottle
from django_ratequeue.decorators import ratelimit


@ratelimit("send_mesage", key="ip")
def send(request: HttpRequest) -> HttpResponse:
    return HttpResponse("sent")


@ratelimit("send_message", key="ip")
def send_right(request: HttpRequest) -> HttpResponse:
    return HttpResponse("sent")


@ratelimit("searches", key="ip")
class Search(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("found")


class Upload(APIView):
    throttle_classes = [RateLimitThrottle]
    throttle_scope = "uploads"

    def post(self, request: Request) -> Response:
        return Response({})


class Download(APIView):
    throttle_classes = [RateLimitThrottle]
    throttle_scope = "send_message"

    def get(self, request: Request) -> Response:
        return Response({})


urlpatterns = [
    path("send/", send),
    path("send-right/", send_right),
    path("search/", Search.as_view()),
    path("upload/", Upload.as_view()),
    path("download/", Download.as_view()),
]

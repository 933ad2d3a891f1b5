"""DRF views for the throttle tests."""

from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratequeue.contrib.drf import AnonRateLimitThrottle, RateLimitThrottle


class StrictThrottle(RateLimitThrottle):
    strict = True


class Hello(APIView):
    def get(self, request: Request) -> Response:
        return Response({"hello": "world"})


class ConfiguredScope(Hello):
    throttle_classes = [RateLimitThrottle]
    throttle_scope = "api_calls"  # in RATEQUEUE["RATE_LIMITS"] (see the tests)


class DrfRateScope(Hello):
    throttle_scope = "drf_rate"  # DEFAULT_THROTTLE_CLASSES, a DRF rate string


class Unscoped(Hello):
    """DEFAULT_THROTTLE_CLASSES applies, but without a scope nothing is throttled."""


class AnonOnly(Hello):
    throttle_classes = [AnonRateLimitThrottle]


class TwoLimits(ConfiguredScope):
    throttle_classes = [AnonRateLimitThrottle, RateLimitThrottle]


class Strict(Hello):
    throttle_classes = [StrictThrottle]
    throttle_scope = "strict"


urlpatterns = [
    path("configured/", ConfiguredScope.as_view()),
    path("drf-rate/", DrfRateScope.as_view()),
    path("unscoped/", Unscoped.as_view()),
    path("anon/", AnonOnly.as_view()),
    path("two-limits/", TwoLimits.as_view()),
    path("strict/", Strict.as_view()),
]

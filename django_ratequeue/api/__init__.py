"""The HTTP API: enqueue exposed jobs, follow them live, read public rate limits.

Built on Django REST framework (the ``drf`` extra): its authentication, permissions,
throttling (:class:`~django_ratequeue.contrib.drf.RateLimitThrottle`), serializers and
schema. ``path("ratequeue/", include("django_ratequeue.urls"))`` mounts it;
docs/http-api.md describes every endpoint.
"""

from django.core.exceptions import ImproperlyConfigured

try:
    import rest_framework  # noqa: F401
except ImportError as exc:  # an extra: pip install django-ratequeue[drf]
    raise ImproperlyConfigured(
        "django_ratequeue's HTTP API (django_ratequeue.urls) needs Django REST framework: "
        "pip install 'django-ratequeue[drf]'."
    ) from exc

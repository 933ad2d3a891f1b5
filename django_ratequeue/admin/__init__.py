"""Admin pages of django-ratequeue, one module per area."""

from . import jobs, queues, ratelimits, workers  # noqa: F401

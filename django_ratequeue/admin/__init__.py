"""Admin pages of django-ratequeue, one module per area."""

from . import jobs, queues, ratelimits, schedules, workers  # noqa: F401

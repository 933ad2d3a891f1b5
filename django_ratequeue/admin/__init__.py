"""Admin pages of django-ratequeue, one module per area."""

from . import batches, jobs, queues, ratelimits, schedules, uniqueclaims, workers  # noqa: F401

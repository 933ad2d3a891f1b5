"""Admin pages of django-ratequeue, one module per area."""

from . import jobs, ratelimits  # noqa: F401

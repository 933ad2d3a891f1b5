"""Admin pages of django-ratequeue, one module per area."""

from . import ratelimits  # noqa: F401

"""Admin pages of django-ratequeue, one module per area."""

from . import (  # noqa: F401
    batches,
    jobs,
    keylimits,
    queues,
    ratelimits,
    schedules,
    uniqueclaims,
    workers,
)
from .placement import hide_django_q_admin

hide_django_q_admin()

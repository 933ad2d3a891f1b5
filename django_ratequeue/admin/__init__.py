"""Admin pages of django-ratequeue, one module per area."""

from django_ratequeue.admin import (  # noqa: F401
    batches,
    jobs,
    keylimits,
    queues,
    ratelimits,
    schedules,
    uniqueclaims,
    workers,
)
from django_ratequeue.admin.placement import hide_django_q_admin

hide_django_q_admin()

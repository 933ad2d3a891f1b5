"""How the recurring schedules join the loop: a phase that enqueues their due runs."""

from __future__ import annotations

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine import hooks
from django_ratequeue.plugins.schedules.runs import EnqueueSchedules


def phases(settings: RateQueueSettings) -> list[hooks.Placed]:
    """Return the schedules' phase for one loop: before start, so a run due now starts."""
    return [hooks.Placed(EnqueueSchedules(), before="start")]


hooks.add_phases("schedules", phases)

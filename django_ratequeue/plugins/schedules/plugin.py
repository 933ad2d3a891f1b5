"""How the recurring schedules join the engine and Django.

A phase of runs, and the system check of the schedules declared (``@job(schedule=...)``
records its own through :mod:`.declarations`, from ``django_ratequeue.intake``)."""

from __future__ import annotations

from django.core.checks import register

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine import hooks
from django_ratequeue.plugins.schedules.checks import check_schedules
from django_ratequeue.plugins.schedules.runs import EnqueueSchedules


def phases(settings: RateQueueSettings) -> list[hooks.Placed]:
    """Return the schedules' phase for one loop: before start, so a run due now starts."""
    return [hooks.Placed(EnqueueSchedules(), before="start")]


hooks.add_phases("schedules", phases)
register(check_schedules)  # the schedules are checked with the settings, at start-up

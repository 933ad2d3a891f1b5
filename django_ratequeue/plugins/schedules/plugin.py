"""How the recurring schedules join the engine and Django.

``@job(schedule=...)``, a phase of runs, and the system check of the schedules declared."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.checks import register

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine import hooks
from django_ratequeue.plugins.schedules.checks import check_schedules
from django_ratequeue.plugins.schedules.declarations import declare_in_code
from django_ratequeue.plugins.schedules.runs import EnqueueSchedules


def declare(path: str, keywords: Mapping[str, Any]) -> None:
    """Record the schedule that ``@job(schedule=..., timezone=..., misfire=...)`` declares."""
    if "schedule" in keywords:
        schedule, timezone, misfire = (
            keywords.get(k) for k in ("schedule", "timezone", "misfire")
        )
        declare_in_code(path, schedule, timezone, misfire)


def phases(settings: RateQueueSettings) -> list[hooks.Placed]:
    """Return the schedules' phase for one loop: before start, so a run due now starts."""
    return [hooks.Placed(EnqueueSchedules(), before="start")]


hooks.add_job_declaration("schedules", declare)
hooks.add_phases("schedules", phases)
register(check_schedules)  # the schedules are checked with the settings, at start-up

"""The schedules' system check: the plug-in registers it (:mod:`.plugin`), ids E240-E244."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error

from django_ratequeue.conf import parse_settings, raw_setting
from django_ratequeue.plugins.schedules.sync import schedule_problems, settings_schedules


def check_schedules(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse the declared schedules that are invalid or could not run.

    Where other settings break a rule (the settings' check says which), only the
    settings' schedules are parsed: jobs and options are checked against valid settings."""
    values, _problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        _specs, problems = settings_schedules(raw_setting("SCHEDULES"))
    else:
        problems = schedule_problems()
    return [Error(p.message, hint=p.hint or None, id=p.id) for p in problems]

"""The system check that validates ``settings.RATEQUEUE`` at start-up.

The rules are the ones the app applies when it reads the settings
(:func:`~django_ratequeue.conf.parse_settings`); this check reports each problem as an
error with its id: E0xx the dict as a whole, E1xx rate limits, E2xx queues and the loop.
It also imports the other checks so that they register.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from . import backends as tasks_backend_checks  # noqa: F401
from .conf import parse_settings


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    _values, problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    return [Error(p.message, hint=p.hint or None, id=p.id) for p in problems]

"""System checks that validate ``settings.RATEQUEUE`` at start-up.

Each part of the app registers its own checks beside its code; this module holds the
checks on the dict as a whole and imports the others so that they register.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, register

from . import backends as tasks_backend_checks  # noqa: F401
from .conf import DEFAULTS, ratequeue_settings
from .queue import checks as queue_checks  # noqa: F401
from .ratelimit import checks as ratelimit_checks  # noqa: F401


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    values = ratequeue_settings()
    unknown = sorted(set(values) - set(DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"Unknown RATEQUEUE setting(s): {', '.join(unknown)}.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="django_ratequeue.E001",
            )
        )
    return errors

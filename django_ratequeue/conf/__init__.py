"""The ``RATEQUEUE`` settings, merged over their defaults, checked and typed.

Read them through :func:`ratequeue_settings`: one typed attribute per setting, built again
when ``override_settings`` changes ``RATEQUEUE``. Every rule is written once, in
:func:`~.parser.parse_settings`: the system checks report its problems at start-up, and
reading settings that break one raises :class:`~django.core.exceptions.ImproperlyConfigured`.
A setting a plug-in parses and checks itself (``SCHEDULES``) is kept as given.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_ratequeue.conf.parser import DURATIONS, merged, parse_settings
from django_ratequeue.conf.values import (
    DEFAULTS,
    Problem,
    PublicRateLimit,
    QueueConfig,
    RateQueueSettings,
)

__all__ = [
    "DEFAULTS",
    "DURATIONS",
    "Problem",
    "PublicRateLimit",
    "QueueConfig",
    "RateQueueSettings",
    "parse_settings",
    "ratequeue_settings",
    "raw_setting",
]


@cache
def ratequeue_settings() -> RateQueueSettings:
    """Return the project's ``RATEQUEUE`` settings merged over :data:`DEFAULTS`.

    Raise ImproperlyConfigured naming every problem when they break a rule."""
    values, problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        listed = "\n".join(f"  {p.id}: {p.message}" for p in problems)
        raise ImproperlyConfigured(
            f"settings.RATEQUEUE is invalid (`manage.py check` says the same):\n{listed}"
        )
    return values


def raw_setting(name: str) -> Any:
    """Return the value ``settings.RATEQUEUE`` gives ``name``, or its default, unchecked.

    A plug-in's check reads the setting it parses itself here, whatever the others hold."""
    values = merged(getattr(settings, "RATEQUEUE", None))
    return (DEFAULTS if values is None else values)[name]


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "RATEQUEUE":
        ratequeue_settings.cache_clear()

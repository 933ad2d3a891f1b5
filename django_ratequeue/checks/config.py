"""Register the system checks of ``settings.RATEQUEUE``, and of the limit names views use.

The settings' rules are the ones the app applies when it reads them
(:func:`~django_ratequeue.conf.parse_settings`); every check's id is named in
:mod:`~django_ratequeue.check_ids`. ``SCHEDULES`` is the schedules plug-in's to check
(``plugins/schedules/checks.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from django_ratequeue import check_ids as ids
from django_ratequeue.conf import parse_settings
from django_ratequeue.decorators import limit_names
from django_ratequeue.engine.fairness.shares import key_limits_problems
from django_ratequeue.ratelimit.config import KeyedConfig


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    _values, problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    return [Error(p.message, hint=p.hint or None, id=p.id) for p in problems]


@register()
def check_per_key_rate_limits(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse a per-key rate limit whose function's dotted path is not importable or callable.

    Its function is imported at the limit's first decision; this finds a misspelt path at
    start-up instead."""
    values, _problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        return []  # check_settings reports them
    problems: list[CheckMessage] = []
    for name, limit in sorted(values.RATE_LIMITS.items()):
        if not isinstance(limit, KeyedConfig) or not isinstance(limit.function, str):
            continue
        where = f'RATEQUEUE["RATE_LIMITS"][{name!r}]["per_key"]'
        try:
            function = import_string(limit.function)
        except Exception as error:  # a missing module, a missing name, an error importing it
            problems.append(
                Error(
                    f"{where} is {limit.function!r}, which cannot be imported: "
                    f"{type(error).__name__}: {error}",
                    hint="The dotted path of a function (key) -> config, "
                    'e.g. "myapp.plans.llm_limit".',
                    id=ids.RATE_LIMIT_PER_KEY_IMPORT,
                )
            )
            continue
        if not callable(function):
            problems.append(
                Error(
                    f"{where} is {limit.function!r}, which is not callable "
                    f"(a {type(function).__name__}).",
                    hint="Name a function (key) -> TokenBucket, FixedWindow or their dict form.",
                    id=ids.RATE_LIMIT_PER_KEY_CALLABLE,
                )
            )
    return problems


@register()
def check_key_limits(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check that each queue's ``key_limits`` names a function that imports."""
    values, _problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        return []  # check_settings reports them
    return [
        Error(
            f'RATEQUEUE["QUEUES"][{queue!r}]["key_limits"] {problem}.',
            hint='A function (key) -> {"max_concurrency": n, "weight": w} or None.',
            id=ids.QUEUE_KEY_LIMITS,
        )
        for queue, problem in key_limits_problems()
    ]


@register()
def check_settings_name(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Warn of a dict setting whose name is within two edits of ``RATEQUEUE`` (``RATEQUEU``).

    It is most likely the app's settings misspelt, which it would never read."""
    return [
        Warning(
            f"settings.{name} is a dict whose name is close to RATEQUEUE: ratequeue reads "
            "settings.RATEQUEUE alone, and runs on its defaults without it.",
            hint=f"If settings.{name} is meant for ratequeue, rename it RATEQUEUE.",
            id=ids.SETTINGS_NAME_MISSPELT,
        )
        for name in sorted(dir(settings))
        if name.isupper()
        and name != "RATEQUEUE"
        and edits(name, "RATEQUEUE") <= 2
        and isinstance(getattr(settings, name, None), dict)
    ]


def edits(a: str, b: str) -> int:
    """Return the Levenshtein distance of ``a`` and ``b``: insertions, deletions, changes."""
    row = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (char != other))
    return row[-1]


@register()
def check_limit_names(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse a limit name that ``@ratelimit`` or a view's throttle uses and no setting defines.

    Its first request would fail. The views are the URLconf's (a view no URL routes to
    never runs); a queue's ``rate_limit`` is checked with the settings (E215)."""
    values, _problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        return []  # check_settings reports them
    views = url_views()
    undefined: dict[str, set[str]] = {}
    for view in views:
        for name in limit_names(view):
            if name not in values.RATE_LIMITS:
                undefined.setdefault(name, set()).add(view_name(view))
    problems = [
        Error(
            f"@ratelimit({name!r}) on {', '.join(sorted(where))} names a limit that "
            'RATEQUEUE["RATE_LIMITS"] does not define: its first request would fail.',
            hint=f'Define RATEQUEUE["RATE_LIMITS"][{name!r}], or pass the decorator config=.',
            id=ids.RATE_LIMIT_UNDEFINED,
        )
        for name, where in sorted(undefined.items())
    ]
    return problems + throttle_problems(views)


def view_name(view: Any) -> str:
    """Return the dotted name of a URL's view (its class's, for a class-based one)."""
    named = getattr(view, "view_class", None) or getattr(view, "cls", None) or view
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', named)}"


def url_views() -> list[Any]:
    """Return the views of the project's URLconf, importing it (and so the views' modules).

    A URLconf that cannot be loaded gives none: Django's own checks report it."""
    views: list[Any] = []

    def walk(patterns: Sequence[Any]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            else:
                views.append(pattern.callback)

    try:
        walk(get_resolver().url_patterns)
    except Exception:
        return []
    return views


def throttle_problems(views: list[Any]) -> list[CheckMessage]:
    """Return a problem for each throttle scope a view's ``RateLimitThrottle`` looks up in
    vain (a class that finds its limit its own way, or has a ``rate``, is left alone)."""
    try:
        from django_ratequeue.contrib.drf import RateLimitThrottle
    except ImproperlyConfigured:  # no Django REST framework: no throttles
        return []
    own = ("get_limit", "get_scope", "get_rate")
    found: dict[tuple[str, str], set[str]] = {}
    for view in views:
        cls = getattr(view, "cls", None) or getattr(view, "view_class", None)
        if cls is None:
            continue
        for throttle in getattr(cls, "throttle_classes", None) or ():
            if not (isinstance(throttle, type) and issubclass(throttle, RateLimitThrottle)):
                continue
            if throttle.rate or any(
                getattr(throttle, name) is not getattr(RateLimitThrottle, name) for name in own
            ):
                continue
            scope = throttle.scope or getattr(cls, "throttle_scope", None)
            if isinstance(scope, str) and scope and not throttle.names_limit(scope):
                found.setdefault((throttle.__qualname__, scope), set()).add(cls.__qualname__)
    return [
        Error(
            f"{throttle} throttles {', '.join(sorted(users))} by the scope {scope!r}, which "
            'names no limit: RATEQUEUE["RATE_LIMITS"] and DRF\'s DEFAULT_THROTTLE_RATES (or '
            "the class's THROTTLE_RATES) do not define it, and its first request would fail.",
            hint=f'Define RATEQUEUE["RATE_LIMITS"][{scope!r}], or a rate for it.',
            id=ids.RATE_LIMIT_UNDEFINED,
        )
        for (throttle, scope), users in sorted(found.items())
    ]

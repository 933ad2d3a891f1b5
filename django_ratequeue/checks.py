"""Register the system checks of ``settings.RATEQUEUE`` and of the services around it.

The settings' rules are the ones the app applies when it reads them
(:func:`~django_ratequeue.conf.parse_settings`); every check's id is named in
:mod:`~django_ratequeue.check_ids`. It also imports the other checks so that they register.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.util import find_spec
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from django_ratequeue import backends as tasks_backend_checks  # noqa: F401
from django_ratequeue import check_ids as ids
from django_ratequeue.conf import parse_settings
from django_ratequeue.decorators import limit_names
from django_ratequeue.engine.fairness.shares import key_limits_problems
from django_ratequeue.engine.models import queue_db
from django_ratequeue.plugins.schedules.sync import schedule_problems
from django_ratequeue.ratelimit.config import KeyedConfig
from django_ratequeue.ratelimit.storage import rate_limit_db

# The Q_CLUSTER keys that choose django-q2's broker; without any, it connects to Redis on
# localhost (django_q.brokers.get_broker).
BROKER_KEYS = ("orm", "redis", "django_redis", "sqs", "iron_mq", "mongo", "broker_class")
# The SQLite transaction modes that take the write lock at BEGIN.
LOCKING_MODES = ("IMMEDIATE", "EXCLUSIVE")


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    _values, problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    return [Error(p.message, hint=p.hint or None, id=p.id) for p in problems]


@register()
def check_broker_database(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check that django-q2's ORM broker keeps its tasks on the queue's database.

    That is the database the router gives the queue's tables, so that a task enqueued in
    a transaction exists exactly when its rows do."""
    cluster = getattr(settings, "Q_CLUSTER", None)
    broker = cluster.get("orm") if isinstance(cluster, dict) else None
    if not broker or broker == queue_db():
        return []
    return [
        Error(
            f"Q_CLUSTER['orm'] is {broker!r}, but ratequeue's tables are on {queue_db()!r} "
            "(the database router's db_for_write for its models).",
            hint="Run django-q2's ORM broker on the database that holds ratequeue's tables, "
            "or route ratequeue's models to the broker's.",
            id=ids.BROKER_DATABASE,
        )
    ]


@register()
def check_anonymous_api(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check that ``API_ALLOW_ANONYMOUS`` has Django's sessions to rely on.

    A visitor who is not logged in owns the jobs they enqueue over the HTTP API through
    their session."""
    values, _problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None or not values.API_ALLOW_ANONYMOUS:
        return []
    for path in settings.MIDDLEWARE:
        try:
            middleware = import_string(path)
        except ImportError:
            continue
        if isinstance(middleware, type) and issubclass(middleware, SessionMiddleware):
            return []
    return [
        Error(
            'RATEQUEUE["API_ALLOW_ANONYMOUS"] is True, but no SessionMiddleware is in '
            "MIDDLEWARE: anonymous visitors own their jobs through their session.",
            hint='Add "django.contrib.sessions.middleware.SessionMiddleware" to MIDDLEWARE, '
            "or keep the API for logged-in users.",
            id=ids.ANONYMOUS_WITHOUT_SESSIONS,
        )
    ]


@register()
def check_sqlite_locking(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse a SQLite database of ratequeue's tables that does not lock for writing at BEGIN.

    SQLite has no row locks: a consume or a reserve is serialisable there only when its
    transaction takes the database's write lock first. Without it, processes racing on a
    limit all read it, and those that write after the first fail with "database is
    locked"."""
    problems: list[CheckMessage] = []
    for alias in sorted({queue_db(), rate_limit_db()}):
        database = settings.DATABASES.get(alias)
        if not database or not str(database.get("ENGINE", "")).endswith("sqlite3"):
            continue
        mode = (database.get("OPTIONS") or {}).get("transaction_mode")
        if isinstance(mode, str) and mode.upper() in LOCKING_MODES:
            continue
        problems.append(
            Error(
                f"The SQLite database {alias!r} holds ratequeue's tables, but its "
                "transactions take the write lock only when they first write: processes "
                'that decide on a limit at once then fail with "database is locked" '
                "instead of waiting their turn.",
                hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["transaction_mode"] = "IMMEDIATE" '
                '(with "timeout": 30 and WAL; see "Operations > SQLite" in the documentation).',
                id=ids.SQLITE_LOCKING,
            )
        )
    return problems


@register()
def check_cluster_broker(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse a project with django-q2 installed whose ``Q_CLUSTER`` names no broker.

    Jobs run on a django-q2 cluster: without a broker named in ``Q_CLUSTER``, django-q2
    connects to Redis on localhost, and ``qcluster`` dies with a connection error where
    there is none."""
    if not apps.is_installed("django_q"):
        return []
    cluster = getattr(settings, "Q_CLUSTER", None)
    if isinstance(cluster, dict) and any(key in cluster for key in BROKER_KEYS):
        return []
    problem = "is not set" if cluster is None else "names no broker"
    return [
        Error(
            f"Q_CLUSTER {problem}: django-q2 would look for Redis on localhost:6379 to run "
            "ratequeue's jobs.",
            hint='Set Q_CLUSTER = {"name": "mysite", "orm": "default"} to keep the queue in '
            'your database (or name your Redis with "redis": {...}); '
            'see "Quick start > The cluster" in the documentation.',
            id=ids.CLUSTER_BROKER,
        )
    ]


@register()
def check_schedules(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse recurring schedules that could not run: a job not registered, bad options.

    Those of ``@job(schedule=...)`` are parsed here too (the settings' own are in
    :func:`check_settings`)."""
    values, _problems = parse_settings(getattr(settings, "RATEQUEUE", None))
    if values is None:
        return []  # check_settings reports them; the schedules are read from valid settings
    return [Error(p.message, hint=p.hint or None, id=p.id) for p in schedule_problems()]


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
def check_asgi_connections(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Warn of persistent connections in a project served under ASGI: they leak there.

    Django runs each ASGI request's sync code on a thread of its own, and a persistent
    connection stays open with the thread it was made on: they pile up until the server
    refuses more. Told when the project has an ASGI entry point (``ASGI_APPLICATION``,
    or an ``asgi`` module beside ``WSGI_APPLICATION``'s)."""
    return asgi_connection_warnings(settings.DATABASES)


def asgi_connection_warnings(databases: dict[str, Any]) -> list[CheckMessage]:
    """Return W320 for each of ``databases`` that keeps connections open, under ASGI."""
    if not serves_asgi():
        return []
    return [
        Warning(
            f"DATABASES[{alias!r}] keeps its connections open (CONN_MAX_AGE "
            f"{database.get('CONN_MAX_AGE')!r}) and the project has an ASGI entry point: "
            "under an ASGI server each request's thread leaves its connection open, until "
            'the database refuses more ("too many clients").',
            hint='Set "CONN_MAX_AGE": 0, or a connection pool (OPTIONS["pool"]); see '
            '"Operations > Database connections" in the documentation.',
            id=ids.ASGI_PERSISTENT_CONNECTIONS,
        )
        for alias, database in databases.items()
        if database.get("CONN_MAX_AGE", 0) != 0 and not (database.get("OPTIONS") or {}).get("pool")
    ]


def serves_asgi() -> bool:
    """Return whether the project has an ASGI entry point (it may be served under ASGI)."""
    if getattr(settings, "ASGI_APPLICATION", None):
        return True
    wsgi = getattr(settings, "WSGI_APPLICATION", None) or ""
    package = wsgi.rpartition(".")[0].rpartition(".")[0]
    try:
        return bool(package) and find_spec(f"{package}.asgi") is not None
    except (ImportError, ValueError):
        return False


@register()
def check_django_q_installed(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Refuse a project without ``django_q`` in ``INSTALLED_APPS``: no cluster runs its jobs."""
    if apps.is_installed("django_q"):
        return []
    return [
        Error(
            '"django_q" is not in INSTALLED_APPS: ratequeue\'s jobs run on a django-q2 '
            "cluster, and without it manage.py qcluster is an unknown command.",
            hint='Add "django_q" to INSTALLED_APPS, beside "django_ratequeue"; '
            'see "Quick start > A project and its settings" in the documentation.',
            id=ids.DJANGO_Q_NOT_INSTALLED,
        )
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

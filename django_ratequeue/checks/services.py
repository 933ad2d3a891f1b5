"""Register the system checks of the services around ratequeue: its databases, django-q2's
cluster, Django's sessions and an ASGI server.

Every check's id is named in :mod:`~django_ratequeue.check_ids`.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.util import find_spec
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from django_ratequeue import check_ids as ids
from django_ratequeue.conf import parse_settings
from django_ratequeue.engine.models import queue_db
from django_ratequeue.ratelimit.storage import rate_limit_db

# The Q_CLUSTER keys that choose django-q2's broker; without any, it connects to Redis on
# localhost (django_q.brokers.get_broker).
BROKER_KEYS = ("orm", "redis", "django_redis", "sqs", "iron_mq", "mongo", "broker_class")
# The SQLite transaction modes that take the write lock at BEGIN.
LOCKING_MODES = ("IMMEDIATE", "EXCLUSIVE")


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

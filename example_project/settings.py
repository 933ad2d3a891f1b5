"""Settings for the example project.

SQLite by default (one file beside this module); PostgreSQL when ``DATABASE_URL`` is set,
e.g. ``DATABASE_URL=postgres://root@127.0.0.1:5432/ratequeue``.

For trying things out on your own machine: DEBUG is on, the SECRET_KEY is public and
``scripts/demo.sh`` creates the superuser admin/admin. Served for real (docs/operations.md,
"Deployment"): ``DJANGO_DEBUG=0`` with ``DJANGO_SECRET_KEY`` (required then), and
``DJANGO_HTTPS=1`` behind HTTPS; ``manage.py check --deploy`` is then clean.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret" if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("Set DJANGO_SECRET_KEY (50 random characters) with DJANGO_DEBUG=0.")
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",")
# Behind HTTPS (DJANGO_HTTPS=1): cookies only over HTTPS, HTTP redirected, HSTS for a day
# to begin with (raise it once HTTPS is known to work; docs/operations.md). Without it,
# check --deploy names these four (W004, W008, W012, W016): each needs HTTPS.
if os.environ.get("DJANGO_HTTPS") == "1":
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = 86400
    # Every subdomain HTTPS too, and the domain may be preloaded into browsers: a
    # commitment for the whole domain (https://hstspreload.org); drop these if it is not yours.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_q",
    "django_ratequeue",
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# Each process's connections when DJANGO_DB_POOL=1 (example_project/asgi.py sets it): a
# request waits up to `timeout` seconds for one of `max_size`, never past PostgreSQL's
# max_connections (size them together: docs/operations.md).
POOL = {"min_size": 2, "max_size": int(os.environ.get("DJANGO_DB_POOL_SIZE", "16")), "timeout": 10}


def database_from_url(url: str) -> dict:
    """Translate ``postgres://user:pass@host:port/name`` or ``sqlite:///path`` to Django's form."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        return sqlite_database(Path(unquote(parsed.path)))
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must start with postgres:// or sqlite://, not {url!r}")
    name = unquote(parsed.path.lstrip("/"))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        # A connection per request, closed as it ends (persistent ones leak under ASGI:
        # one per request's thread). Under WSGI the threads bound them; under ASGI, where
        # requests at once are not bounded, asgi.py turns on psycopg's pool (POOL below),
        # which is. docs/operations.md, "Database connections".
        "CONN_MAX_AGE": 0,
        **({"OPTIONS": {"pool": POOL}} if os.environ.get("DJANGO_DB_POOL") == "1" else {}),
        "TEST": {"NAME": f"test_{name}"},
    }


def sqlite_database(path: Path) -> dict:
    """SQLite set up for several processes: WAL, a busy timeout, locks taken at BEGIN."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # A file, not :memory:, so that qcluster processes started by tests share it.
        "TEST": {"NAME": str(path.with_name(f"test_{path.name}"))},
    }


DATABASES = {
    "default": database_from_url(os.environ["DATABASE_URL"])
    if os.environ.get("DATABASE_URL")
    else sqlite_database(BASE_DIR / "db.sqlite3")
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS: list[dict] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
LOGIN_URL = "/admin/login/"

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

Q_CLUSTER = {
    "name": "ratequeue",
    "orm": "default",
    "workers": int(os.environ.get("Q_WORKERS", "2")),
    "timeout": 300,
    "retry": 360,
    "poll": 0.02,
    "catch_up": False,
    "save_limit": 100,
    "ack_failures": True,
    "max_attempts": 1,
}

# Only registered jobs run: the demo's are in its app's jobs.py, which the app imports at
# start-up; jobs elsewhere would be listed in "JOB_MODULES" (see docs/api.md).
RATEQUEUE = {
    "MAX_CONCURRENCY": 8,
    "RATE_LIMITS": {
        "failed_logins": {"kind": "token bucket", "rate": 10, "period": 3600},
        "free_trial_signup": {"kind": "token bucket", "rate": 100, "period": 3600},
        "send_message": {"kind": "token bucket", "rate": 10, "period": 60, "capacity": 20},
        "weather_api": {"kind": "fixed window", "rate": 5, "period": 60},
        # The LLM provider's token budget: the "llm" queue reserves each job's cost here.
        # Public: the "Ask the model" page shows it (one value for everybody).
        "llm_tokens": {
            "kind": "token bucket",
            "rate": 1200,
            "period": 60,
            "capacity": 200,
            "max_reserved": 2000,
            "public": True,
            "key": None,
        },
        # Each user's own budget on the "Ask the model" page: five questions of 40 tokens,
        # then one more every two minutes. Public: each user sees their own.
        "llm_user_tokens": {
            "kind": "token bucket",
            "rate": 200,
            "period": 600,
            "capacity": 200,
            "public": True,
            "key": "user",
        },
    },
    "QUEUES": {
        "emails": {"max_concurrency": 2},
        # Per user (concurrency_key): one call at a time each, four in all, within the budget.
        "llm": {
            "max_concurrency": 1,
            "total_concurrency": 4,
            "rate_limit": "llm_tokens",
            # Each user's own limit by plan (docs/key-limits.md): bob may ask two at once.
            "key_limits": "example_project.demo.plans.llm_key_limits",
        },
        # Served by remote workers only (docs/remote-workers.md): scripts/demo.sh starts one.
        "remote": {"max_concurrency": 2, "remote": True},
    },
    # A recurring schedule (docs/schedules.md): one run a minute, so that a visitor sees
    # its runs in the admin's jobs and its next run under "Schedules".
    "SCHEDULES": {
        "demo-every-minute": {
            "function": "example_project.demo.jobs.fast",
            "cron": "* * * * *",
            "args": [7],
            "misfire": "once",
        },
    },
}

REST_FRAMEWORK: dict[str, object] = {
    # Browsers log in with their session; machine clients send "Authorization: Token <key>"
    # (manage.py drf_create_token <user>): one indexed read, no password hashed per request.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    # Throttles only views that set throttle_scope (a RATE_LIMITS name or a rate below).
    "DEFAULT_THROTTLE_CLASSES": ["django_ratequeue.contrib.drf.RateLimitThrottle"],
    "DEFAULT_THROTTLE_RATES": {"demo_api": "5/minute"},
}

# Everything to the console (the server's log): the app's lifecycle, and Django's errors,
# with their tracebacks also when DEBUG is off (a 500 is never silent). 4xx answers are
# not logged: the client was told.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "{asctime} {levelname} {name} {process} {message}", "style": "{"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django": {"handlers": ["console"], "level": "WARNING"},
        "django.request": {"level": "ERROR"},
        "django_ratequeue": {"handlers": ["console"], "level": "INFO"},
        "django-q": {"handlers": ["console"], "level": "WARNING"},
    },
}

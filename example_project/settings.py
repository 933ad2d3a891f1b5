"""Settings for the example project.

SQLite by default (one file beside this module); PostgreSQL when ``DATABASE_URL`` is set,
e.g. ``DATABASE_URL=postgres://root@127.0.0.1:5432/ratequeue``.

For trying things out on your own machine only: DEBUG is on, the SECRET_KEY is public and
``scripts/demo.sh`` creates the superuser admin/admin. Do not expose it to a network.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
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
        "CONN_MAX_AGE": None,
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
    # Throttles only views that set throttle_scope (a RATE_LIMITS name or a rate below).
    "DEFAULT_THROTTLE_CLASSES": ["django_ratequeue.contrib.drf.RateLimitThrottle"],
    "DEFAULT_THROTTLE_RATES": {"demo_api": "5/minute"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_ratequeue": {"handlers": ["console"], "level": "INFO"},
        "django-q": {"handlers": ["console"], "level": "WARNING"},
    },
}

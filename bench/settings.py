"""Benchmark settings: the example project's, on PostgreSQL, with a Redis cache for the peers.

The queue benchmark's peers are configured here too: django-q2 (``Q_CLUSTER``, ORM broker,
two workers) and django-tasks-db (``TASKS``). ``BENCH_WITHOUT_RATEQUEUE=1`` leaves our app
out, for a django-q2 cluster that runs nothing of ours.

``BENCH_ADMIN=1`` keeps the admin (bench.dashboard). ``BENCH_DB_POOL=1`` pools the
database's connections (bench.http's ASGI server).
``DATABASE_URL`` picks the database (default ``postgres://root@127.0.0.1:5432/ratequeue_bench``,
created and migrated by the benchmark); ``BENCH_REDIS_URL`` the Redis database that DRF's
throttle, django-ratelimit and ``limits`` share; ``BENCH_WORKERS`` the qcluster's workers
(default 2).
"""

import copy
import json
import os
from importlib.util import find_spec

from django_ratequeue.conf import DEFAULTS as RATEQUEUE_DEFAULTS
from example_project.settings import *  # noqa: F403
from example_project.settings import (
    INSTALLED_APPS,
    LOGGING,
    Q_CLUSTER,
    RATEQUEUE,
    database_from_url,
)

DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", "postgres://root@127.0.0.1:5432/ratequeue_bench")
    )
}

# The benchmarks measure with persistent connections, as they always did (the example
# closes them after each request, for its ASGI server's sake); bench.load runs the
# example's own (BENCH_EXAMPLE_CONNECTIONS=1), and a pool (the example's ASGI server,
# BENCH_DB_POOL) takes none.
POOLED = "pool" in DATABASES["default"].get("OPTIONS", {})
if os.environ.get("BENCH_EXAMPLE_CONNECTIONS") != "1" and not POOLED:
    DATABASES["default"]["CONN_MAX_AGE"] = None

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
}

# The benchmark serves no pages but the HTTP API (bench.http): no admin to discover at
# start-up. Its clients authenticate with DRF's tokens. bench.dashboard times an admin
# page: it keeps the admin (``BENCH_ADMIN=1``).
if os.environ.get("BENCH_ADMIN") != "1":
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django.contrib.admin"]
INSTALLED_APPS += ["bench"]  # rest_framework.authtoken: the example project has it
ROOT_URLCONF = "bench.urls"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"]
}
if os.environ.get("BENCH_WITHOUT_RATEQUEUE") == "1":
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django_ratequeue"]
# django-tasks-db; before Django 6 on the django-tasks backport, which is an app itself.
INSTALLED_APPS += (
    ["django_tasks_db"] if find_spec("django.tasks") else ["django_tasks", "django_tasks_db"]
)
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

Q_CLUSTER = {**Q_CLUSTER, "workers": int(os.environ.get("BENCH_WORKERS", "2"))}
# Ours at the library's default concurrency unless the queue benchmark asks for another.
RATEQUEUE = {
    **RATEQUEUE,
    "MAX_CONCURRENCY": int(
        os.environ.get("BENCH_MAX_CONCURRENCY", RATEQUEUE_DEFAULTS["MAX_CONCURRENCY"])
    ),
    # bench.jobs is left free of our app for django-q2 alone; this module registers them.
    "JOB_MODULES": ["bench.ratequeue_jobs"],
    # The demo's schedule would enqueue runs while the benchmarks measure.
    "SCHEDULES": {},
    # The HTTP benchmark measures the enqueue itself: no per-user throttle in the way.
    "API_THROTTLES": {"enqueue": None, "read": None},
    # More settings as JSON, e.g. the queues and rate limits of the flow-control benchmark.
    **json.loads(os.environ.get("BENCH_RATEQUEUE", "{}")),
}

# With DEBUG on, Django records every query: a cost no production process pays.
DEBUG = False

# An ASGI server runs each request's sync code in a thread of its own: its connection
# comes from psycopg's pool (Django's "pool" option) rather than being opened per request.
DB_POOL = {"min_size": 4, "max_size": 16}
if os.environ.get("BENCH_DB_POOL") == "1":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = DB_POOL

# The lifecycle's log stays off (a worker prints it when LOGGING names none of its
# loggers; the example project logs it at INFO, a line per job): no benchmark measures
# writing it. bench.overhead's ON runs
# (RATEQUEUE_BENCH_TRACING=1) have OpenTelemetry's SDK and lifecycle receivers in every
# process; its OFF runs hear no event at all.
LOGGING = copy.deepcopy(LOGGING)
LOGGING["loggers"]["django_ratequeue.lifecycle"] = {"level": "ERROR"}  # type: ignore[index]
if os.environ.get("RATEQUEUE_BENCH_TRACING") == "1":
    INSTALLED_APPS += ["bench.observed.ObservedConfig"]

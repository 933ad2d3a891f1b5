"""Benchmark settings: the example project's, on PostgreSQL, with a Redis cache for the peers.

``DATABASE_URL`` picks the database (default ``postgres://root@127.0.0.1:5432/ratequeue_bench``,
created and migrated by the benchmark); ``BENCH_REDIS_URL`` the Redis database that DRF's
throttle, django-ratelimit and ``limits`` share.
"""

import os

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS, database_from_url

DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", "postgres://root@127.0.0.1:5432/ratequeue_bench")
    )
}

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
}

# The benchmark serves no pages: no admin to discover at start-up.
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django.contrib.admin"] + ["bench"]

# With DEBUG on, Django records every query: a cost no production process pays.
DEBUG = False

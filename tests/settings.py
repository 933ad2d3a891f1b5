"""Test settings: the example project's, on the database ``DATABASE_URL`` names.

The test scripts run the suite twice: once with ``DATABASE_URL`` unset (SQLite, a file so
that qcluster processes share it) and once with it pointing at PostgreSQL.
"""

import os

import django

from example_project.settings import *  # noqa: F403
from example_project.settings import (
    BASE_DIR,
    DATABASES,
    INSTALLED_APPS,
    RATEQUEUE,
    REST_FRAMEWORK,
)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Keep the SQLite test database apart from the demo's; tests create and remove it.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["TEST"]["NAME"] = os.environ.get(
        "RATEQUEUE_TEST_SQLITE", str(BASE_DIR.parent / ".pytest-ratequeue.sqlite3")
    )
# scripts/test.sh runs its pytest legs side by side: each gives its test database a suffix
# of its own, as pytest-xdist does for its workers, so that no two legs share one.
if suffix := os.environ.get("RATEQUEUE_TEST_DB_SUFFIX"):
    DATABASES["default"]["TEST"]["NAME"] += f"_{suffix}"

# The tests' jobs and tasks are not in an installed app's jobs.py or tasks.py: import them at
# start-up so that they are registered (only registered jobs run), in the test process and
# in the qcluster workers the tests start. The fault drill's test runs the drill's jobs.
RATEQUEUE = {
    **RATEQUEUE,
    # The demo's schedule would enqueue runs in every test that leads the loop.
    "SCHEDULES": {},
    "JOB_MODULES": [
        "tests.queue.jobs",
        "tests.queue.batch_jobs",
        "tests.queue.hostile_jobs",
        "tests.queue.blip_jobs",
        "tests.api.jobs",
        "bench.ratequeue_jobs",
    ]
    + (["tests.tasks_backend.tasks"] if django.VERSION >= (6, 0) else []),
    # The test client's event streams hold no server thread: no share of threads caps
    # them, except in the tests of that cap (tests/api/test_stream_caps.py).
    "API_WSGI_THREADS": 10_000,
}

# The HTTP API's tests log in with sessions and with DRF's tokens, as the example does.
assert "rest_framework.authtoken" in INSTALLED_APPS
assert "TokenAuthentication" in str(REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"])

# django.tasks (Django 6.0+) runs on ratequeue, in the tests and in their qcluster workers;
# a failing task gets one quick retry.
if django.VERSION >= (6, 0):
    TASKS = {
        "default": {
            "BACKEND": "django_ratequeue.backends.RateQueueBackend",
            "QUEUES": [],
            "OPTIONS": {
                "retries": {"retry_count": 1, "initial_interval": 0.1, "randomize_interval": False}
            },
        }
    }

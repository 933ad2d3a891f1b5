"""Name every system-check id django-ratequeue reports (``manage.py check``).

E0xx: ``settings.RATEQUEUE`` as a whole; E1xx: rate limits; E2xx: queues and the loop;
E3xx: the services around them. docs/operations.md says what each setting's ids mean.
"""

from __future__ import annotations

# E0xx: settings.RATEQUEUE as a whole
UNKNOWN_SETTING = "django_ratequeue.E001"  # unknown, or removed (the message says why)
SETTINGS_NOT_A_DICT = "django_ratequeue.E002"

# E1xx: rate limits
RATE_LIMITS_NOT_A_DICT = "django_ratequeue.E101"
RATE_LIMIT_NAME = "django_ratequeue.E102"
RATE_LIMIT_CONFIG = "django_ratequeue.E103"
RATE_LIMIT_ASYNC_COMMIT = "django_ratequeue.E104"
RATE_LIMITED_VIEW = "django_ratequeue.E105"
RATE_LIMIT_PUBLIC = "django_ratequeue.E106"
RATE_LIMIT_PER_KEY_IMPORT = "django_ratequeue.E107"  # {"per_key": path} cannot be imported
RATE_LIMIT_PER_KEY_CALLABLE = "django_ratequeue.E108"  # {"per_key": path} is not callable
# A name @ratelimit or a RateLimitThrottle uses that no setting defines
RATE_LIMIT_UNDEFINED = "django_ratequeue.E109"

# E2xx: queues and the loop
POSITIVE_INTEGER = "django_ratequeue.E201"  # MAX_CONCURRENCY, the size limits...
DURATION = "django_ratequeue.E202"  # SEGMENT, LOOP_LEASE, the intervals...
WORKER_DEAD_AFTER = "django_ratequeue.E203"
LOOP_LEASE = "django_ratequeue.E204"
RETENTION = "django_ratequeue.E205"
DEFAULT_RETRIES = "django_ratequeue.E206"
ENQUEUE_RATE_LIMIT = "django_ratequeue.E207"
ENQUEUE_ASYNC_COMMIT = "django_ratequeue.E208"
QUEUES_NOT_A_DICT = "django_ratequeue.E210"
QUEUE_NOT_A_DICT = "django_ratequeue.E211"
QUEUE_UNKNOWN_OPTION = "django_ratequeue.E212"
QUEUE_MAX_CONCURRENCY = "django_ratequeue.E213"
QUEUE_KEY_CONCURRENCY = "django_ratequeue.E214"  # an option that was removed
QUEUE_RATE_LIMIT = "django_ratequeue.E215"
QUEUE_PAUSED = "django_ratequeue.E216"
QUEUE_NAME = "django_ratequeue.E217"
QUEUE_TOTAL_CONCURRENCY = "django_ratequeue.E218"
QUEUE_REMOTE = "django_ratequeue.E219"
JOB_MODULES = "django_ratequeue.E220"
ROLLUP_RETENTION = "django_ratequeue.E221"
SLOTS = "django_ratequeue.E222"
FAILED_RETENTION = "django_ratequeue.E223"
QUEUE_KEY_WEIGHT = "django_ratequeue.E224"
QUEUE_KEY_LIMITS = "django_ratequeue.E225"  # not a dotted path, or not a callable
QUEUE_PUBLIC_POSITION = "django_ratequeue.E226"
CLOCK = "django_ratequeue.E230"
# E24x: recurring schedules (RATEQUEUE["SCHEDULES"] and @job(schedule=...))
SCHEDULES_NOT_A_DICT = "django_ratequeue.E240"
SCHEDULE_INVALID = "django_ratequeue.E241"  # its expression, zone, interval, misfire...
SCHEDULE_FUNCTION = "django_ratequeue.E242"  # not a registered job
SCHEDULE_OPTIONS = "django_ratequeue.E243"  # enqueue options or arguments that fail
SCHEDULE_NAME_TAKEN = "django_ratequeue.E244"  # declared twice (settings and @job)

# E3xx: the services around them
TASKS_BACKEND_NEEDS_DJANGO_6 = "django_ratequeue.E301"
BROKER_DATABASE = "django_ratequeue.E302"
API_ALLOW_ANONYMOUS = "django_ratequeue.E303"
ANONYMOUS_WITHOUT_SESSIONS = "django_ratequeue.E304"
SQLITE_LOCKING = "django_ratequeue.E306"
CLUSTER_BROKER = "django_ratequeue.E307"
TASKS_BACKEND_WITHOUT_APP = "django_ratequeue.E310"
API_THROTTLES = "django_ratequeue.E311"
API_STREAM_SHARE = "django_ratequeue.E318"
DJANGO_Q_ADMIN = "django_ratequeue.E312"
DJANGO_Q_NOT_INSTALLED = "django_ratequeue.E313"
# W3xx: warnings about the services around them
ASGI_PERSISTENT_CONNECTIONS = "django_ratequeue.W320"

# W0xx: warnings
SETTINGS_NAME_MISSPELT = "django_ratequeue.W001"  # a dict named within 2 edits of RATEQUEUE

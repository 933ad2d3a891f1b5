"""A contender for the concurrency tests: consume one limit as fast as possible.

Run as ``python -m tests.ratelimit.hammer NAME CONFIG_JSON ATTEMPTS`` with
``DJANGO_SETTINGS_MODULE`` and ``DATABASE_URL`` naming the test database. It prints
``ready``, waits for a line on stdin (the start barrier), then prints how many of its
attempts were admitted.
"""

from __future__ import annotations

import json
import sys

import django


def main() -> None:
    name, config, attempts = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    django.setup()
    from django_ratequeue import check_rate_limit, rate_limit

    check_rate_limit(name, config=config)  # connect before the start
    print("ready", flush=True)
    sys.stdin.readline()
    admitted = sum(rate_limit(name, config=config).ok for _ in range(attempts))
    print(admitted, flush=True)


if __name__ == "__main__":
    main()

"""A contender for the unique-enqueue races: enqueue one key as fast as possible.

Run as ``python -m tests.queue.unique_contender MODE INDEX CALLS`` with
``DJANGO_SETTINGS_MODULE`` and ``DATABASE_URL`` naming the test database. MODE is
``unique_for`` or ``debounce``. It prints ``ready``, waits for a line on stdin (the
start barrier), enqueues ``CALLS`` calls of ``tests.queue.jobs.echo`` under one unique
key (its arguments: its INDEX and the call's number), then prints the job ids it got
back and when it began and ended, as a JSON object.
"""

from __future__ import annotations

import json
import sys
import time

import django


def main() -> None:
    mode, index, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    django.setup()
    from django_ratequeue.models import Job
    from tests.queue import jobs

    Job.objects.exists()  # connect before the start
    echo = jobs.echo.using(**{mode: 600}, unique_key="race")
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.time()
    ids = [echo.enqueue(index=index, call=call).id for call in range(calls)]
    print(json.dumps({"ids": ids, "began": began, "ended": time.time()}), flush=True)


if __name__ == "__main__":
    main()

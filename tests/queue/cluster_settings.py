"""Settings of the qcluster processes the queue tests start: the test settings, with the
RATEQUEUE overrides a test passes in ``RATEQUEUE_OVERRIDES`` (JSON)."""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import RATEQUEUE

RATEQUEUE = {**RATEQUEUE, **json.loads(os.environ.get("RATEQUEUE_OVERRIDES", "{}"))}
# LOGGING as a new project has it (none), for the worker's own terminal lines.
if os.environ.get("RATEQUEUE_TEST_NO_LOGGING") == "1":
    LOGGING: dict[str, object] = {}

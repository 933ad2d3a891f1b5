"""Settings of the qcluster processes the queue tests start: the test settings, with the
RATEQUEUE overrides a test passes in ``RATEQUEUE_OVERRIDES`` (JSON)."""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import RATEQUEUE

RATEQUEUE_BASE_LIMITS = RATEQUEUE.get("RATE_LIMITS", {})

OVERRIDES = json.loads(os.environ.get("RATEQUEUE_OVERRIDES", "{}"))
RATEQUEUE = {**RATEQUEUE, **OVERRIDES}
# A test's RATE_LIMITS add to the project's: the example's views name limits of their own
# (protect_login's "failed_logins"), which the start-up check E109 requires defined.
if "RATE_LIMITS" in OVERRIDES:
    RATEQUEUE["RATE_LIMITS"] = {**RATEQUEUE_BASE_LIMITS, **OVERRIDES["RATE_LIMITS"]}
# LOGGING as a new project has it (none), for the worker's own terminal lines.
if os.environ.get("RATEQUEUE_TEST_NO_LOGGING") == "1":
    LOGGING: dict[str, object] = {}

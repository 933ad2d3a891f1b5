"""The bounds on what a job may ask for, and safe arithmetic on the times it gives.

Every number a producer passes is finite and bounded at enqueue, so that nothing the loop
later computes from a job (its start, its next retry, its deadline) can overflow a
datetime or a database column. Rows changed behind the app's back get the same safety from
:func:`later`, which clamps instead of raising. docs/api.md lists these bounds.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ..columns import check_name

# How far ahead a job may be scheduled (start_at, run_after) or a retry may wait.
MAX_DELAY = timedelta(days=3650)
# The longest timeout of one attempt.
MAX_TIMEOUT = timedelta(days=7)
# The most retries a job may ask for, and the steepest back-off.
MAX_RETRY_COUNT = 1000
MAX_BACKOFF_FACTOR = 100.0
# priority and cost are 32-bit integer columns on every database.
MAX_INT = 2**31 - 1
MIN_INT = -(2**31)
# The latest moment the loop ever computes: far beyond MAX_DELAY, still a valid datetime
# after rounding up to a SEGMENT.
LATEST = datetime(9999, 1, 1, tzinfo=UTC)

# A NUL character in JSON text: ``\u0000`` after an even run of backslashes (an odd run
# would be an escaped backslash followed by the letters "u0000").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
NUL_REFUSED = "must not contain NUL characters ('\\x00'): PostgreSQL cannot store them"


def seconds(name: str, value: Any, bound: timedelta, *, allow_zero: bool = True) -> float:
    """``value`` (seconds or a timedelta) as finite seconds within ``bound``, or a
    ValueError naming ``name`` and what it may be."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds or a timedelta, not {value!r}.")
    most = bound.total_seconds()
    if not (0 <= value <= most) or (value == 0 and not allow_zero):
        low = "0 or more" if allow_zero else "more than 0"
        raise ValueError(f"{name} must be {low} and at most {most:g} seconds, got {value!r}.")
    return float(value)


def integer(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high``, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, not {value!r}.")
    return value


def check_queue_name(name: Any) -> str:
    """``name`` if it can name a queue: a non-empty string the ``queue`` columns hold."""
    return check_name("A queue name", name, "Job", "queue")


def check_queue_concurrency(name: str, limit: Any, ceiling: int) -> int:
    """``limit`` if it can be queue ``name``'s max_concurrency: 0 (paused) to ``ceiling``,
    the MAX_QUEUE_CONCURRENCY setting."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= ceiling:
        raise ValueError(
            f"max_concurrency of queue {name!r} must be an integer from 0 (paused) to "
            f"MAX_QUEUE_CONCURRENCY ({ceiling}), got {limit!r}."
        )
    return limit


def later(moment: datetime, delay: float) -> datetime:
    """``moment`` plus ``delay`` seconds, clamped to :data:`LATEST` (and never before
    ``moment``): whatever a row holds, the loop's arithmetic on it never raises. A NaN
    delay (a timeout of NaN written into a row) is taken as forever."""
    if moment >= LATEST or delay <= 0:
        return moment
    if math.isnan(delay) or delay >= (LATEST - moment).total_seconds():
        return LATEST
    return moment + timedelta(seconds=delay)


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` bytes of UTF-8: its beginning and its end (where a
    traceback names the error) around a note of what was cut. Characters UTF-8 cannot
    encode (lone surrogates) are replaced, so that the text can always be stored."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode()
    note = f"\n[... {len(data) - limit} bytes cut ...]\n".encode()
    keep = max(limit - len(note), 0)
    head, tail = data[: keep - keep // 2], data[len(data) - keep // 2 :]
    return (head + note + tail).decode("utf-8", "ignore")


def check_no_nul(what: str, json_text: str) -> None:
    """A ValueError if the JSON text holds a NUL character (PostgreSQL cannot store one)."""
    if "\\u0000" in json_text and _JSON_NUL.search(json_text):
        raise ValueError(f"The job's {what} {NUL_REFUSED}.")


def check_json(what: str, value: Any) -> str:
    """``value`` as JSON text, or a ValueError saying what to pass instead."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"The job's {what} must be JSON-serialisable ({exc}); pass plain data such as "
            "ids, strings, numbers, lists and dicts."
        ) from None
    check_no_nul(what, text)
    return text

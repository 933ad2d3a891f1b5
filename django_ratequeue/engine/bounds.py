"""The bounds on what a job may ask for, and safe arithmetic on the times it gives.

Numbers are checked at enqueue (:func:`seconds`, :func:`integer`), times computed from a
row are clamped (:func:`later`), and what is stored is what a database can hold
(:func:`check_json`, :func:`check_text`, :func:`clip`). docs/api.md lists these bounds;
docs/concepts.md ("Results, owners and handles") tells why.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django_ratequeue.columns import check_name
from django_ratequeue.plain import clip as clip

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
# The heaviest weight a concurrency key may have (docs/key-limits.md).
MAX_KEY_WEIGHT = 1000
# The latest moment the loop ever computes: far beyond MAX_DELAY, still a valid datetime
# after rounding up to a SEGMENT.
LATEST = datetime(9999, 1, 1, tzinfo=UTC)

# How deep JSON may nest (lists and objects in one another). Every reader, from the
# runner to the HTTP API's answers, then decodes and encodes it far within Python's
# recursion limit; serde_json's default is the same.
MAX_JSON_DEPTH = 128

# A NUL character in JSON text: ``\u0000`` after an even run of backslashes (an odd run
# would be an escaped backslash followed by the letters "u0000").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
NUL_REFUSED = "must not contain NUL characters ('\\x00'): PostgreSQL cannot store them"
SURROGATE_REFUSED = (
    "must be valid Unicode: it holds a lone surrogate such as '\\udce9' (what os.fsdecode() "
    "gives for a file name that is not UTF-8), which no database can store; decode such "
    "bytes with errors='replace', or pass them as base64"
)
DEPTH_REFUSED = f"must not nest lists and objects more than {MAX_JSON_DEPTH} deep"


def seconds(name: str, value: Any, bound: timedelta, *, allow_zero: bool = True) -> float:
    """Return ``value`` (seconds or a timedelta) as finite seconds within ``bound``.

    Raise a ValueError naming ``name`` and what it may be when it is not."""
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
    """Return ``value`` as an int from ``low`` to ``high``; else raise a ValueError.

    The error names ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, not {value!r}.")
    return value


def check_queue_name(name: Any) -> str:
    """Return ``name`` if it can name a queue: a non-empty string the ``queue`` columns hold."""
    return check_name("A queue name", name, "Job", "queue")


def check_queue_concurrency(name: str, limit: Any, ceiling: int) -> int:
    """Return ``limit`` if it can be queue ``name``'s max_concurrency, else raise a ValueError.

    It may be 0 (paused) to ``ceiling``, the MAX_QUEUE_CONCURRENCY setting."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= ceiling:
        raise ValueError(
            f"max_concurrency of queue {name!r} must be an integer from 0 (paused) to "
            f"MAX_QUEUE_CONCURRENCY ({ceiling}), got {limit!r}."
        )
    return limit


def later(moment: datetime, delay: float) -> datetime:
    """Return ``moment`` plus ``delay`` seconds, clamped to :data:`LATEST`.

    Never before ``moment``: whatever a row holds, the loop's arithmetic on it never
    raises. A NaN delay (a timeout of NaN written into a row) is taken as forever."""
    if moment >= LATEST or delay <= 0:
        return moment
    if math.isnan(delay) or delay >= (LATEST - moment).total_seconds():
        return LATEST
    return moment + timedelta(seconds=delay)


def check_text(what: str, text: str) -> str:
    """Return ``text`` if a database can store it, else raise a ValueError naming ``what``.

    It must hold no NUL and no lone surrogate."""
    if "\x00" in text:
        raise ValueError(f"{what} {NUL_REFUSED}.")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} {SURROGATE_REFUSED}.") from None
    return text


def storable(value: Any) -> bool:
    """Say whether ``value`` is text a database can store, or not text (:func:`check_text`).

    An id in a URL that is not names nothing: a 404, not a 500."""
    if not isinstance(value, str):
        return True
    try:
        check_text("", value)
    except ValueError:
        return False
    return True


def check_json(what: str, value: Any) -> str:
    """Return ``value`` as JSON text if a database can store it, else raise a ValueError.

    The error says what to pass instead: it must be JSON (finite numbers), nested at most
    :data:`MAX_JSON_DEPTH` deep, and its strings must hold no NUL and no lone surrogate."""
    subject = f"The job's {what}"
    try:
        text = json.dumps(value, allow_nan=False)
    except RecursionError:
        raise ValueError(f"{subject} {DEPTH_REFUSED}.") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{subject} must be JSON-serialisable ({exc}); pass plain data such as "
            "ids, strings, numbers, lists and dicts."
        ) from None
    return check_json_text(subject, text)


def check_json_text(subject: str, text: str) -> str:
    """Return JSON ``text`` (as ``json.dumps`` writes it) if a database can store it.

    Else raise a ValueError whose message starts with ``subject``: its strings must hold no
    NUL and no lone surrogate, and it must nest at most :data:`MAX_JSON_DEPTH` deep."""
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ValueError(f"{subject} {NUL_REFUSED}.")
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and nested_deeper(text, MAX_JSON_DEPTH):
        raise ValueError(f"{subject} {DEPTH_REFUSED}.")
    # Characters beyond the BMP are escaped as surrogate pairs too: only then, look closer.
    if "\\ud" in text:
        check_text(subject, json.dumps(json.loads(text), ensure_ascii=False))
    return text


def nested_deeper(text: str, depth: int) -> bool:
    """Return whether JSON ``text`` nests lists and objects more than ``depth`` deep.

    Measured on the text, without recursion (whatever the depth) and in C: its strings
    and scalars taken out, each pass removes the innermost pairs of brackets."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    for _ in range(depth):
        if not brackets:
            return False
        brackets = _EMPTY_PAIR.sub("", brackets)
    return bool(brackets)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")

"""The ``unique_for``, ``debounce`` and ``unique_key`` options: checked, and held at enqueue.

Checked with the other options (:mod:`django_ratequeue.engine.options` asks
:func:`check_uniqueness`, declared in :mod:`.plugin`); in the enqueue's transaction
:meth:`Uniqueness.hold` claims the key (:mod:`.claims`). docs/deduplication.md tells what
each option means.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from django_ratequeue.engine.bounds import check_text, seconds
from django_ratequeue.engine.options import JobStamp, JobTemplate
from django_ratequeue.plugins.unique.claims import claim_burst, claim_window

# The longest de-duplication window or debounce delay.
MAX_UNIQUE_WINDOW = timedelta(days=365)
# The longest unique_key (it is hashed: this bounds the work, not a column).
MAX_UNIQUE_KEY_LENGTH = 1000

Mode = Literal["unique_for", "debounce"]


@dataclass(frozen=True)
class Uniqueness:
    """What ``unique_for`` or ``debounce`` asks of an enqueue, checked."""

    mode: Mode
    window: timedelta
    # The caller's unique_key; None: the call's arguments are the key.
    key: str | None

    @property
    def delay(self) -> timedelta | None:
        """Return the start a debounce decides: once the burst has been quiet a window."""
        return self.window if self.mode == "debounce" else None

    def hold(
        self, template: JobTemplate, args: list[Any], kwargs: dict[str, Any], stamp: JobStamp
    ) -> str | None:
        """Claim the call's unique key for the job of ``stamp``, or find the job that holds it.

        Return the id of the job that answers the call instead (nothing is written for
        it then, or its arguments and start were debounced); None to write the job of
        ``stamp``. Call it in the enqueue's transaction."""
        key = self.claim_key(template.func, template.owner, args, kwargs)
        if self.mode == "unique_for":
            return claim_window(key, stamp.id, stamp.created_at, self.window)
        return claim_burst(key, stamp.id, stamp.start_at, args, kwargs)

    def claim_key(self, func: str, owner: str, args: list[Any], kwargs: dict[str, Any]) -> str:
        """Return the claim's key of a call: a digest of mode, function, owner and key.

        Without a ``unique_key``, the key is the canonical JSON of the arguments."""
        given: list[Any] = ["key", self.key] if self.key is not None else ["args", args, kwargs]
        text = json.dumps(
            [self.mode, func, owner, *given],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
        return hashlib.sha256(text.encode()).hexdigest()


def check_uniqueness(options: Mapping[str, Any]) -> Uniqueness | None:
    """Return what ``unique_for``/``debounce``/``unique_key`` ask for, or raise ValueError.

    None when neither ``unique_for`` nor ``debounce`` is given."""
    unique_for, debounce = options.get("unique_for"), options.get("debounce")
    key = options.get("unique_key")
    if unique_for is None and debounce is None:
        if key is not None:
            raise ValueError("unique_key needs unique_for or debounce.")
        return None
    if unique_for is not None and debounce is not None:
        raise ValueError(
            "Give unique_for or debounce, not both: unique_for keeps the first call of a "
            "window, debounce the last call of a burst."
        )
    mode: Mode = "unique_for" if unique_for is not None else "debounce"
    if mode == "debounce":
        _check_debounce(options)
    window = seconds(
        mode, unique_for if mode == "unique_for" else debounce, MAX_UNIQUE_WINDOW, allow_zero=False
    )
    return Uniqueness(mode, timedelta(seconds=window), _unique_key(key))


def _check_debounce(options: Mapping[str, Any]) -> None:
    """Refuse the options a debounce cannot go with: it decides the start, and new ids."""
    if options.get("id") is not None:
        raise ValueError(
            "Give id or debounce, not both: a debounce writes a new job once the last one "
            "started, which could never have the same id."
        )
    if options.get("start_at") is not None or options.get("run_after") is not None:
        raise ValueError(
            "debounce decides when the job starts (after the burst goes quiet): give "
            "debounce or start_at/run_after, not both."
        )


def _unique_key(key: Any) -> str | None:
    """Return ``key`` if it can be a unique_key, else raise a ValueError."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_UNIQUE_KEY_LENGTH:
        raise ValueError(
            f"unique_key must be a non-empty string of at most {MAX_UNIQUE_KEY_LENGTH} "
            f"characters, not {key!r:.100}."
        )
    return check_text("unique_key", key)

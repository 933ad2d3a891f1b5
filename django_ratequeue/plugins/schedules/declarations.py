"""Recurring schedules as declared: in ``RATEQUEUE["SCHEDULES"]`` or by ``@job(schedule=...)``.

A declaration is parsed into a :class:`ScheduleSpec` (every rule here, once), and each
run of a schedule gets the job id :func:`run_id` makes. docs/schedules.md tells the
format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django_ratequeue.engine.bounds import check_json, check_text
from django_ratequeue.plugins.schedules.recurrence import Recurrence

MISFIRE_POLICIES = ("skip", "once", "all")
KEYS = frozenset({"function", "cron", "every", "timezone", "args", "kwargs", "options", "misfire"})
# Options a schedule decides itself: each run's id, its start (it starts when it is due).
OWN_OPTIONS = frozenset({"id", "on_duplicate_id", "start_at", "run_after"})
# A run's id is the name, "@" and the time: the name leaves room for it in the id column.
NAME_MAX_LENGTH = 150
CODE = "code"
SETTINGS = "settings"


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule as declared: what runs, when, and what a misfire does."""

    name: str
    function: str
    recurrence: Recurrence
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    misfire: str = "skip"
    source: str = SETTINGS

    def declaration(self) -> dict[str, Any]:
        """Return the declaration as JSON data: what the table keeps to notice a change."""
        recurrence = self.recurrence
        return {
            "function": self.function,
            "cron": recurrence.cron,
            "every": recurrence.every,
            "timezone": recurrence.timezone,
            "args": self.args,
            "kwargs": self.kwargs,
            "options": self.options,
            "misfire": self.misfire,
        }


def check_name(name: object) -> str:
    """Return ``name`` if it can name a schedule, or raise ValueError."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a schedule's name must be a non-empty string, not {name!r}.")
    if len(name) > NAME_MAX_LENGTH:
        raise ValueError(f"a schedule's name must be at most {NAME_MAX_LENGTH} characters.")
    return check_text("the schedule's name", name)


def check_misfire(value: object) -> str:
    if value not in MISFIRE_POLICIES:
        raise ValueError(
            f"misfire must be one of {', '.join(map(repr, MISFIRE_POLICIES))}, not {value!r}."
        )
    return str(value)


def _json_copy(what: str, value: Any, kind: type) -> Any:
    """Return a JSON-safe copy of ``value``, which must be a ``kind`` (list or dict)."""
    if not isinstance(value, list | tuple if kind is list else Mapping):
        raise ValueError(f"{what} must be a {kind.__name__}, not {value!r}.")
    try:
        return json.loads(check_json(what, list(value) if kind is list else dict(value)))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what}: {error}") from None


def parse_spec(name: object, raw: object, source: str = SETTINGS) -> ScheduleSpec:
    """Return the schedule ``name`` declares with ``raw`` (a dict), or raise ValueError.

    The message says what is wrong; whether the function is a registered job, and the
    options valid, is checked where jobs are known (:mod:`.sync`)."""
    name = check_name(name)
    if not isinstance(raw, Mapping):
        raise ValueError(f"must be a dict with 'function' and 'cron' or 'every', not {raw!r}.")
    unknown = sorted(map(str, set(raw) - KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}.")
    function = raw.get("function")
    if not isinstance(function, str) or "." not in function:
        raise ValueError(f"function must be the dotted path of a @job, not {function!r}.")
    check_text("function", function)
    options = _json_options(raw.get("options", {}))
    return ScheduleSpec(
        name=name,
        function=function,
        recurrence=Recurrence.parse(raw.get("cron"), raw.get("every"), raw.get("timezone")),
        args=_json_copy("args", raw.get("args", []), list),
        kwargs=_json_copy("kwargs", raw.get("kwargs", {}), dict),
        options=options,
        misfire=check_misfire(raw.get("misfire", "skip")),
        source=source,
    )


def _json_options(options: object) -> dict[str, Any]:
    """Return the enqueue options of each run, refusing those the schedule sets itself."""
    if not isinstance(options, Mapping):
        raise ValueError(f"options must be a dict of enqueue options, not {options!r}.")
    own = sorted(OWN_OPTIONS & set(options))
    if own:
        raise ValueError(
            f"options must not set {', '.join(own)}: each run's id derives from the schedule "
            "and its time, and it starts when it is due."
        )
    result: dict[str, Any] = _json_copy("options", options, dict)
    return result


def run_id(name: str, at: datetime) -> str:
    """Return the job id of the run of schedule ``name`` due at ``at``.

    The same run always gets the same id, so that it is enqueued once whoever enqueues
    it (``on_duplicate_id="ignore"``)."""
    moment = at.astimezone(UTC)
    stamp = moment.strftime("%Y%m%dT%H%M%S")
    if moment.microsecond:
        stamp += f".{moment.microsecond:06d}"
    return f"{name}@{stamp}Z"


def manual_run_id(name: str, now: datetime) -> str:
    """Return the job id of a "run now" of ``name`` asked for at ``now``: one per minute."""
    return f"{name}@now-{now.astimezone(UTC).strftime('%Y%m%dT%H%M')}Z"


# Declarations made by @job(schedule=...): the job's dotted path -> its raw declaration.
_declared_in_code: dict[str, dict[str, Any]] = {}


def declare_in_code(path: str, schedule: Any, timezone: Any, misfire: Any) -> None:
    """Record the schedule ``@job(schedule=..., timezone=..., misfire=...)`` declares.

    ``schedule`` is a cron expression or an interval (seconds or a timedelta). It is
    checked with the settings' schedules, at start-up."""
    key = "cron" if isinstance(schedule, str) else "every"
    raw: dict[str, Any] = {"function": path, key: schedule}
    if timezone is not None:
        raw["timezone"] = timezone
    if misfire is not None:
        raw["misfire"] = misfire
    _declared_in_code[path] = raw


def code_declarations() -> dict[str, dict[str, Any]]:
    """Return the schedules ``@job`` declared, by name (the job's dotted path)."""
    return dict(_declared_in_code)

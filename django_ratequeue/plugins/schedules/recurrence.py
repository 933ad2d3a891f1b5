"""When a recurring schedule runs: a cron expression in a time zone, or a plain interval.

A cron expression is matched against wall-clock times in the schedule's zone; each
matching wall time runs once, at the instant its first interpretation names (``fold=0``).
docs/schedules.md ("Time zones and DST") tells what that means on the days the clocks
change.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from django_ratequeue.engine.bounds import LATEST

# The aliases croniter knows for common expressions.
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# The shortest and the longest plain interval, in seconds.
MIN_EVERY = 1.0
MAX_EVERY = timedelta(days=366).total_seconds()
# Far enough around an instant to hold any change of a zone's offset (at most a few hours).
DST_REACH = timedelta(hours=3)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EXPRESSION_MAX_LENGTH = 200
# A cron expression's fields: name, smallest and largest value.
CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 6),
)
# croniter's parses are kept and repositioned: one thread at a time moves them.
_walking = threading.Lock()


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """Return the IANA time zone ``name``, or raise ValueError."""
    if not isinstance(name, str) or not name or len(name) > 64 or "\x00" in name:
        raise ValueError(
            f"timezone must be an IANA zone name such as 'Europe/Paris', not {name!r}."
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"timezone {name!r} is not a known IANA time zone (e.g. 'UTC', 'Europe/Paris')."
        ) from None


@lru_cache(maxsize=4096)
def _parsed(expression: str) -> croniter:
    """Return croniter's parse of ``expression``, to be positioned with ``set_current``."""
    return croniter(expression, datetime(2000, 1, 1))


def check_cron(expression: object) -> str:
    """Return ``expression`` if it is a five-field cron expression that ever matches.

    Raise ValueError saying what is wrong otherwise."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError(f"cron must be an expression such as '0 3 * * *', not {expression!r}.")
    text = " ".join(expression.split())
    if len(text) > EXPRESSION_MAX_LENGTH:
        raise ValueError(f"cron is longer than {EXPRESSION_MAX_LENGTH} characters.")
    fields = text.split(" ")
    if text.startswith("@"):
        if text.lower() not in ALIASES:
            raise ValueError(f"cron {text!r} is not one of {', '.join(ALIASES)}.")
    elif len(fields) != 5:
        raise ValueError(
            f"cron {text!r} has {len(fields)} fields; it must have five "
            "(minute hour day-of-month month day-of-week), e.g. '0 3 * * *'."
        )
    elif any(f.upper().startswith("H") or f.upper() == "R" for f in fields):
        raise ValueError(f"cron {text!r}: hashed (H) and random (R) fields are not supported.")
    else:
        check_steps(text, fields)
    try:
        parsed = croniter(text, datetime(2000, 1, 1))
        parsed.get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(f"cron {text!r} never matches a date.") from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"cron {text!r} is invalid: {error}") from None
    return text


def check_steps(text: str, fields: list[str]) -> None:
    """Refuse a step beyond its field's range, such as ``*/61`` for the minute.

    It would match the range's first value alone: ``*/61 * * * *`` runs hourly, which is
    never what it says."""
    for (name, low, high), field in zip(CRON_FIELDS, fields, strict=True):
        for part in field.split(","):
            _, slash, step = part.partition("/")
            if slash and step.isdigit() and int(step) > high - low:
                raise ValueError(
                    f"cron {text!r}: the step /{step} of the {name} field is beyond its "
                    f"range ({low}-{high}), so {part!r} would match its first value alone; "
                    f"a {name} step is at most {high - low}."
                )


def check_every(value: object) -> float:
    """Return ``value`` (seconds or a timedelta) as a plain interval, or raise ValueError."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"every must be a number of seconds or a timedelta, not {value!r}.")
    if not math.isfinite(value) or not (MIN_EVERY <= value <= MAX_EVERY):
        raise ValueError(
            f"every must be between {MIN_EVERY:g} second and {MAX_EVERY:g} seconds "
            f"(366 days), not {value!r}."
        )
    return float(value)


@dataclass(frozen=True)
class Recurrence:
    """The times a schedule runs: ``cron`` in ``timezone``, or every ``every`` seconds.

    Plain intervals run at the multiples of ``every`` since the Unix epoch, so every
    process agrees on them and ``every=60`` runs on the minute."""

    cron: str = ""
    every: float | None = None
    timezone: str = "UTC"

    @classmethod
    def parse(cls, cron: object, every: object, timezone: object) -> Recurrence:
        """Return the recurrence of one of ``cron`` or ``every``, or raise ValueError."""
        if (cron in (None, "")) == (every is None):
            raise ValueError('give exactly one of "cron" (an expression) or "every" (seconds).')
        tz = "UTC" if timezone is None else timezone
        zone(tz)
        if every is not None:
            return cls(every=check_every(every), timezone=str(tz))
        return cls(cron=check_cron(cron), timezone=str(tz))

    def describe(self) -> str:
        """Return the recurrence as people read it, e.g. ``cron 0 3 * * * (Europe/Paris)``."""
        if self.every is not None:
            return f"every {self.every:g} s"
        return f"cron {self.cron} ({self.timezone})"

    def next_after(self, moment: datetime) -> datetime:
        """Return the first run strictly after ``moment`` (aware), in UTC.

        LATEST when there is none within the datetime range."""
        if self.every is not None:
            return _next_interval(moment, self.every)
        try:
            with _walking:
                return _next_cron(self.cron, zone(self.timezone), moment)
        except (CroniterBadDateError, OverflowError, ValueError):
            return LATEST


@lru_cache(maxsize=4096)
def parsed(cron: str | None, every: float | None, timezone: str) -> Recurrence:
    """Return :meth:`Recurrence.parse` of a stored recurrence, parsed once per process."""
    return Recurrence.parse(cron, every, timezone)


def _next_interval(moment: datetime, every: float) -> datetime:
    """Return the first multiple of ``every`` seconds since the epoch after ``moment``."""
    step = round(every * 1_000_000)
    elapsed = (moment - EPOCH) // timedelta(microseconds=1)
    try:
        return EPOCH + timedelta(microseconds=(elapsed // step + 1) * step)
    except OverflowError:
        return LATEST


def instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """Return the UTC instant of the naive wall time ``wall`` in ``tz``: its first meaning.

    A repeated wall time means its first occurrence; one the clocks skip means the
    instant it would have been before they changed."""
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def _steady(tz: ZoneInfo, around: datetime) -> bool:
    """Return whether ``tz``'s offset does not change within DST_REACH of ``around``."""
    return (around - DST_REACH).astimezone(tz).utcoffset() == (around + DST_REACH).astimezone(
        tz
    ).utcoffset()


def _matches(expression: str, start: datetime) -> croniter:
    """Return croniter positioned at the naive wall time ``start``."""
    walker = _parsed(expression)
    walker.set_current(start, force=True)
    return walker


def _next_cron(expression: str, tz: ZoneInfo, moment: datetime) -> datetime:
    """Return the earliest instant of a matching wall time that is after ``moment``.

    Away from any change of offset, wall time and instants go together: the next
    matching wall time is the answer. Near one, the matching wall times from DST_REACH
    before ``moment`` to DST_REACH after the first answer are compared."""
    moment = moment.astimezone(UTC)
    wall = moment.astimezone(tz).replace(tzinfo=None)
    walker = _matches(expression, wall)
    candidate_wall: datetime = walker.get_next(datetime)
    candidate = instant(candidate_wall, tz)
    if candidate > moment and _steady(tz, moment) and _steady(tz, candidate):
        return candidate
    walker = _matches(expression, wall - DST_REACH - timedelta(minutes=1))
    best: datetime | None = None
    limit: datetime | None = None
    while limit is None or candidate_wall <= limit:
        candidate_wall = walker.get_next(datetime)
        candidate = instant(candidate_wall, tz)
        if candidate > moment and (best is None or candidate < best):
            best = candidate
            limit = limit or candidate_wall + 2 * DST_REACH
    assert best is not None
    return best

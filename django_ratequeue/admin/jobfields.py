"""How a job's admin page shows its values: JSON, times, progress, retry policies and
tracebacks."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_ratequeue.jobs import AttemptInfo, Retry
from django_ratequeue.models import Job

# A traceback's frame in django-ratequeue's own code (any host's copy of it).
OWN_FRAME = re.compile(r'  File ".*[/\\]django_ratequeue[/\\][^"]*", line \d+')

# Progress fields read as "this many of that many", in the order tried.
PROGRESS_PAIRS = (
    ("done", "total"),
    ("current", "total"),
    ("completed", "total"),
    ("processed", "total"),
    ("count", "total"),
    ("step", "steps"),
)


def json_block(value: Any) -> SafeString:
    """Return ``value`` as indented JSON in a ``<pre>`` block."""
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


def time_of_day(moment: datetime | None) -> str:
    """Return the local time of day to the millisecond (attempts are often less than a
    second apart), or "-"."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%H:%M:%S.%f")[:-3]


def full_time(moment: datetime | None) -> SafeString | str:
    """Return a time to the millisecond, with its date and zone, or "-"."""
    if moment is None:
        return "-"
    local = timezone.localtime(moment)
    shown = f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d} {local:%Z}"
    return format_html('<time datetime="{}">{}</time>', moment.isoformat(), shown)


def without_own_frames(traceback: str) -> str:
    """Return ``traceback`` without the frames of django-ratequeue's own code.

    They are how the worker called the job: the job's own frames tell what failed."""
    kept, skipping = [], False
    for line in traceback.splitlines(keepends=True):
        if line.startswith("  File "):
            skipping = bool(OWN_FRAME.match(line))
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "".join(kept)


class JobPageFields:
    """The job page's times and flags in words, mixed into :class:`.jobs.JobAdmin`."""

    @admin.display(description="created")
    def created_time(self, job: Job) -> SafeString | str:
        return full_time(job.created_at)

    @admin.display(description="start at")
    def start_time(self, job: Job) -> SafeString | str:
        return full_time(job.start_at)

    @admin.display(description="finished")
    def finished_time(self, job: Job) -> SafeString | str:
        return full_time(job.finished_at)

    @admin.display(description="cancel requested")
    def cancel_asked(self, job: Job) -> str:
        """Say yes or no in words: "no" is no error."""
        return "yes" if job.cancel_requested else "no"

    @admin.display(description="traceback")
    def formatted_traceback(self, job: Job) -> SafeString | str:
        """Show the traceback without the library's own frames."""
        if not job.traceback:
            return "-"
        return format_html("<pre>{}</pre>", without_own_frames(job.traceback))


def run_seconds(attempt: AttemptInfo) -> str:
    """Return how long ``attempt`` ran, in seconds, or "" if it has not ended."""
    if attempt.started_at is None or attempt.ended_at is None:
        return ""
    return f"{(attempt.ended_at - attempt.started_at).total_seconds():.3f} s"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def progress_fraction(progress: Any) -> tuple[float, float] | None:
    """Return ``(done, total)`` when the reported progress says how far the job is, else None.

    It says so as a pair of numbers such as ``{"done": 3, "total": 10}`` (see
    PROGRESS_PAIRS), or a ``percent``. ``done`` is kept between 0 and ``total``;
    anything else is not a fraction."""
    if not isinstance(progress, dict):
        return None
    for done_key, total_key in PROGRESS_PAIRS:
        done, total = _number(progress.get(done_key)), _number(progress.get(total_key))
        if done is not None and total is not None and total > 0:
            return min(max(done, 0.0), total), total
    percent = _number(progress.get("percent"))
    if percent is not None:
        return min(max(percent, 0.0), 100.0), 100.0
    return None


def progress_bar(progress: Any) -> SafeString:
    """Return a ``<progress>`` bar with its figures in words, or nothing."""
    fraction = progress_fraction(progress)
    if fraction is None:
        return SafeString("")
    done, total = fraction
    share = f"{done / total:.0%}"
    words = f"{done:g} of {total:g} ({share})" if total != 100 else share
    return format_html(
        '<div class="rq-progress"><progress max="{}" value="{}" aria-label="Progress">{}'
        '</progress><span class="rq-progress-text">{}</span></div>',
        total,
        done,
        share,
        words,
    )


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def describe_retry(policy: Retry) -> str:
    """Return the retry policy in words.

    For example "Up to 6 retries: the first 1 s after a failure, then twice as long each
    time, at most 1 h; each wait varies by up to 20%."."""
    if policy.retry_count == 0:
        return "No retries: the first failure is final."
    plural = "retry" if policy.retry_count == 1 else "retries"
    text = f"Up to {policy.retry_count} {plural}: "
    first = min(policy.initial_interval, policy.max_interval)
    if policy.retry_count == 1:
        text += f"{_duration(first)} after the failure"
    elif policy.backoff_factor == 1 or first == policy.max_interval:
        text += f"{_duration(first)} after each failure"
    else:
        factor = "twice" if policy.backoff_factor == 2 else f"{policy.backoff_factor:g} times"
        text += (
            f"the first {_duration(first)} after a failure, then {factor} as long each time, "
            f"at most {_duration(policy.max_interval)}"
        )
    if policy.randomize_interval:
        text += "; each wait varies by up to 20%"
    return text + "."

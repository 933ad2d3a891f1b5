"""Check the values of one enqueue's options: its queue, key, owner, id, times and retries.

:class:`.options.JobOptions` asks these, in its fixed order, before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import (
    MAX_DELAY,
    MAX_TIMEOUT,
    check_queue_concurrency,
    check_queue_name,
    seconds,
)
from django_ratequeue.engine.handles import owner_label
from django_ratequeue.engine.models import DEFAULT_QUEUE, Job
from django_ratequeue.engine.registry import function_path
from django_ratequeue.engine.retry import Retry

OWNER_MAX_LENGTH = Job._meta.get_field("owner").max_length or 255


@dataclass(frozen=True)
class QueueChoice:
    name: str = DEFAULT_QUEUE
    max_concurrency: int | None = None

    @classmethod
    def coerce(cls, value: Any) -> QueueChoice:
        if value is None:
            return cls()
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, Mapping):
            raise ValueError(
                f"queue must be a name or {{'name': ..., 'max_concurrency': n}}, not {value!r}."
            )
        unknown = sorted(set(value) - {"name", "max_concurrency"})
        if unknown:
            raise ValueError(f"Unknown queue option(s): {', '.join(unknown)}.")
        name = check_queue_name(value.get("name"))
        limit = value.get("max_concurrency")
        if limit is not None:
            check_queue_concurrency(name, limit, ratequeue_settings().MAX_QUEUE_CONCURRENCY)
        return cls(name=name, max_concurrency=limit)


def concurrency_key(key: Any) -> str:
    """Return ``key`` if it can be a concurrency key, else raise a ValueError."""
    if not isinstance(key, str) or len(key) > 255:
        raise ValueError(
            f"concurrency_key must be a string of at most 255 characters, not {key!r}."
        )
    return key


def owner_of(owner: Any) -> str:
    """Return the stored form of ``owner``, if it fits its column."""
    label = owner_label(owner)
    if len(label) > OWNER_MAX_LENGTH:
        raise ValueError(
            f"owner must be at most {OWNER_MAX_LENGTH} characters, got {len(label)}; "
            "pass a shorter identity, such as a user or its primary key."
        )
    return label


def custom_id(job_id: Any, on_duplicate_id: Any) -> tuple[str | None, bool]:
    """Return the custom ``id`` (None: a new one) and whether a duplicate is ignored."""
    if job_id is not None and (not isinstance(job_id, str) or not job_id or len(job_id) > 200):
        raise ValueError(
            f"id must be a non-empty string of at most 200 characters, not {job_id!r}."
        )
    if on_duplicate_id not in ("error", "ignore"):
        raise ValueError("on_duplicate_id must be 'error' or 'ignore'.")
    return job_id, on_duplicate_id == "ignore"


def parse_start_at(value: Any) -> datetime:
    """Return ``start_at`` as an aware datetime at most MAX_DELAY ahead, or raise ValueError."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"start_at {value!r} is not an ISO-8601 date and time, "
                "e.g. '2026-04-03T12:00:00Z'."
            ) from None
    if not isinstance(value, datetime):
        raise ValueError(f"start_at must be a datetime or an ISO-8601 string, not {value!r}.")
    try:
        if timezone.is_naive(value):
            value = timezone.make_aware(value)
        ahead = value.astimezone(UTC) - timezone.now()
    except (OverflowError, ValueError):  # at the very ends of the datetime range
        raise ValueError(f"start_at {value!r} is out of range.") from None
    if ahead > MAX_DELAY:
        raise ValueError(
            f"start_at {value.isoformat()} is too far ahead: a job may be scheduled at most "
            f"{MAX_DELAY.days} days ahead."
        )
    return value


def retry_of(retries: Any) -> Retry:
    """Return the retry policy ``retries`` gives, or the settings' default."""
    return ratequeue_settings().DEFAULT_RETRIES if retries is None else Retry.coerce(retries)


def timeout_of(timeout: Any) -> float | None:
    """Return ``timeout`` checked: seconds above zero, or None (no time limit)."""
    return None if timeout is None else seconds("timeout", timeout, MAX_TIMEOUT, allow_zero=False)


def callback_path(on_complete: Any) -> str:
    """Return the dotted path of the ``on_complete`` callback, or "" for none."""
    return "" if on_complete is None else function_path(on_complete, "on_complete callback")


def start_of(start_at: Any, run_after: Any) -> tuple[datetime | None, timedelta | None]:
    """Return (``start_at``, ``run_after``) checked: one of them at most."""
    if start_at is not None and run_after is not None:
        raise ValueError("Give start_at or run_after, not both.")
    if start_at is not None:
        return parse_start_at(start_at), None
    if run_after is not None:
        return None, timedelta(seconds=seconds("run_after", run_after, MAX_DELAY))
    return None, None

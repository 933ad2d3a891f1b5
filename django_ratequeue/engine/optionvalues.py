"""Check the values of one enqueue's options: its queue, concurrency key, owner and id.

:class:`.options.JobOptions` asks these, in its fixed order, before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import check_queue_concurrency, check_queue_name
from django_ratequeue.engine.handles import owner_label
from django_ratequeue.engine.models import DEFAULT_QUEUE, Job

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

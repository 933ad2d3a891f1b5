"""Change a queue's limits, or ``MAX_CONCURRENCY``, at runtime, without a deploy.

The admin, ``manage.py ratequeue_queue`` and the functions below all go through
:func:`change_queue` (:func:`set_max_concurrency` for the loop's row); docs/queues.md
("Changing a queue at runtime") tells what each change does and when it takes effect.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import MAX_INT, check_queue_name, integer
from django_ratequeue.engine.bounds import check_queue_concurrency as queue_concurrency
from django_ratequeue.engine.limits import (
    hold_for_later_enqueues,
    store_environment_limit,
    store_queue_changes,
)
from django_ratequeue.engine.models import QueueSetting, queue_db
from django_ratequeue.engine.wakeup import LOOP, signal


def check_queue_concurrency(name: str, limit: Any) -> int:
    """Return ``limit`` if it can be queue ``name``'s max_concurrency, else raise ValueError.

    It can be from 0 to the settings' ceiling, MAX_QUEUE_CONCURRENCY."""
    return queue_concurrency(name, limit, ratequeue_settings().MAX_QUEUE_CONCURRENCY)


def check_total_concurrency(name: str, limit: Any) -> int:
    """Return ``limit`` if it can be queue ``name``'s total_concurrency, else raise ValueError.

    It can be from 1 to MAX_QUEUE_CONCURRENCY."""
    ceiling = ratequeue_settings().MAX_QUEUE_CONCURRENCY
    return integer(f"total_concurrency of queue {name!r}", limit, 1, ceiling)


def change_queue(name: str, **changes: Any) -> QueueSetting:
    """Store ``changes`` for queue ``name`` and kick the loop once they are committed.

    ``changes`` are ``paused`` (True/False), ``max_concurrency`` and
    ``total_concurrency``; None for any goes back to the setting. A row left with
    nothing to override is deleted. It returns once they hold for every job enqueued
    later (:func:`.engine.limits.wait_for_the_step_in_flight`)."""
    check_queue_name(name)
    unknown = sorted(set(changes) - {"paused", "max_concurrency", "total_concurrency"})
    if unknown:
        raise ValueError(f"Unknown queue setting(s): {', '.join(unknown)}.")
    if changes.get("max_concurrency") is not None:
        check_queue_concurrency(name, changes["max_concurrency"])
    if changes.get("total_concurrency") is not None:
        check_total_concurrency(name, changes["total_concurrency"])
    with transaction.atomic(using=queue_db()):
        setting = store_queue_changes(name, **changes)
        signal(LOOP)
        hold_for_later_enqueues()
    return setting


def pause_queue(name: str) -> None:
    """Start nothing more in queue ``name`` (running jobs finish) until :func:`resume_queue`."""
    change_queue(name, paused=True)


def resume_queue(name: str) -> None:
    """Let queue ``name`` start jobs again, even if ``RATEQUEUE["QUEUES"]`` pauses it."""
    change_queue(name, paused=False)


def set_queue_concurrency(name: str, max_concurrency: int | None) -> None:
    """Run at most ``max_concurrency`` jobs of queue ``name`` at once.

    From 0 to ``MAX_QUEUE_CONCURRENCY``; None goes back to the limit in settings."""
    change_queue(name, max_concurrency=max_concurrency)


def set_max_concurrency(limit: int | None) -> None:
    """Run at most ``limit`` jobs at once in the whole environment.

    Whatever ``RATEQUEUE["MAX_CONCURRENCY"]`` says; None goes back to the setting.
    Running jobs finish; the loop applies the limit at its next step, which this
    kicks."""
    if limit is not None:
        integer("MAX_CONCURRENCY", limit, 1, MAX_INT)
    with transaction.atomic(using=queue_db()):
        store_environment_limit(limit)
        signal(LOOP)
        hold_for_later_enqueues()


__all__ = ["pause_queue", "resume_queue", "set_max_concurrency", "set_queue_concurrency"]

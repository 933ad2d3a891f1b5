"""Set a concurrency key's own limits at runtime: the one writer of KeyLimit rows.

``set_key_limit`` and the admin both go through :func:`store_key_limit`, which records
the change (:class:`~.models.KeyLimitChange`), moves the version every process's cache
of keys' limits watches (:mod:`.keyshares`) and kicks the loop. docs/key-limits.md tells
what the values mean and when they take effect.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import MAX_KEY_WEIGHT, check_queue_name, check_text, integer
from django_ratequeue.engine.fairness.models import KeyLimit, KeyLimitChange
from django_ratequeue.engine.limits import hold_for_later_enqueues
from django_ratequeue.engine.models import RuntimeLimits, queue_db
from django_ratequeue.engine.wakeup import LOOP, signal

# The longest concurrency key (Job.concurrency_key).
MAX_KEY_LENGTH = 255


def check_key(key: Any) -> str:
    """Return ``key`` if it can be a concurrency key ("" for jobs without one), else raise."""
    if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"A concurrency key must be a string of at most {MAX_KEY_LENGTH} characters "
            f'("" for the jobs without one), not {key!r}.'
        )
    return check_text("A concurrency key", key)


def check_key_concurrency(queue: str, key: str, limit: Any) -> int:
    """Return ``limit`` if it can be a key's max_concurrency, else raise a ValueError.

    It can be from 0 (none of its jobs start) to MAX_QUEUE_CONCURRENCY."""
    ceiling = ratequeue_settings().MAX_QUEUE_CONCURRENCY
    what = f"max_concurrency of key {key!r} in queue {queue!r} (0: none start)"
    return integer(what, limit, 0, ceiling)


def check_key_weight(queue: str, key: str, weight: Any) -> int:
    """Return ``weight`` if it can be a key's weight, else raise a ValueError naming it."""
    return integer(f"weight of key {key!r} in queue {queue!r}", weight, 1, MAX_KEY_WEIGHT)


def set_key_limit(
    queue: str,
    key: str,
    *,
    max_concurrency: int | None = None,
    weight: int | None = None,
    changed_by: str = "",
) -> KeyLimit | None:
    """Give concurrency ``key`` of ``queue`` these limits, in place of the defaults.

    The key's limits become exactly what is given: None for either goes back to its
    default (the queue's ``key_limits`` function, else the queue's ``max_concurrency``
    and ``key_weight``), and None for both removes the key's row (returning None).
    ``changed_by`` is recorded with the change. The loop applies it at its next step,
    which this kicks; running jobs finish."""
    check_queue_name(queue)
    check_key(key)
    if max_concurrency is not None:
        check_key_concurrency(queue, key, max_concurrency)
    if weight is not None:
        check_key_weight(queue, key, weight)
    if not isinstance(changed_by, str):
        raise ValueError(f"changed_by must be a string (who made the change), not {changed_by!r}.")
    check_text("changed_by", changed_by)
    return store_key_limit(queue, key, max_concurrency, weight, changed_by)


def store_key_limit(
    queue: str, key: str, max_concurrency: int | None, weight: int | None, changed_by: str
) -> KeyLimit | None:
    """Write key ``key``'s limits (checked by the caller) with a record of the change.

    One transaction; a row left with nothing to override is deleted; nothing is recorded
    when nothing changes."""
    with transaction.atomic(using=queue_db()):
        row = KeyLimit.objects.select_for_update().filter(queue=queue, key=key).first()
        old = (None, None) if row is None else (row.max_concurrency, row.weight)
        if old == (max_concurrency, weight):
            return row
        KeyLimitChange.objects.create(
            queue=queue,
            key=key,
            changed_at=clock.now(),
            changed_by=changed_by[:150],
            old_max_concurrency=old[0],
            new_max_concurrency=max_concurrency,
            old_weight=old[1],
            new_weight=weight,
        )
        if max_concurrency is None and weight is None:
            KeyLimit.objects.filter(queue=queue, key=key).delete()
            row = None
        else:
            row = row or KeyLimit(queue=queue, key=key)
            row.max_concurrency, row.weight = max_concurrency, weight
            row.save()
        refresh_key_limits()
    return row


def refresh_key_limits() -> None:
    """Make every process read the keys' limits afresh at its next step.

    Call it when the answers of a queue's ``key_limits`` function change (a tenant's
    plan changed); :func:`set_key_limit` calls it itself."""
    with transaction.atomic(using=queue_db()):
        RuntimeLimits.ensure()
        RuntimeLimits.objects.filter(pk=RuntimeLimits.SINGLETON).update(
            key_limits_version=F("key_limits_version") + 1
        )
        signal(LOOP)
        hold_for_later_enqueues()


__all__ = ["refresh_key_limits", "set_key_limit"]

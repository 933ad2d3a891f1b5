"""Enqueue under a unique key (``unique_for``, ``debounce``): hold it, or be answered by its job.

:mod:`.enqueue` calls these in the enqueue's transaction; :mod:`.uniqueclaims` writes
the claims. docs/deduplication.md tells the semantics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction

from django_ratequeue.engine.models import Job, queue_db
from django_ratequeue.engine.options import JobStamp, JobTemplate, check_enqueue_rate
from django_ratequeue.engine.wakeup import LOOP, signal
from django_ratequeue.exceptions import DuplicateJobId
from django_ratequeue.plugins.unique.claims import claim_burst, claim_window

# One call of a job: its positional and its keyword arguments.
Call = tuple[list[Any], dict[str, Any]]


def hold_key(
    template: JobTemplate, args: list[Any], kwargs: dict[str, Any], stamp: JobStamp
) -> str | None:
    """Claim the call's unique key for the job of ``stamp``, or find the job that holds it.

    Return the id of the job that answers the call instead (nothing is written for it
    then, or its arguments and start were debounced); None to write the job of
    ``stamp``, or when the template has no unique key. Call it in the enqueue's
    transaction."""
    unique = template.unique
    if unique is None:
        return None
    key = unique.claim_key(template.func, template.owner, args, kwargs)
    if unique.mode == "unique_for":
        return claim_window(key, stamp.id, stamp.created_at, unique.window)
    return claim_burst(key, stamp.id, stamp.start_at, args, kwargs)


def write_each_holding_keys(
    template: JobTemplate, calls: Iterable[Call], stamped: list[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], set[str]]:
    """Write the calls of a bulk enqueue with ``unique_for`` or ``debounce``, in order.

    Each call holds its own key as one enqueue would; a call answered by another job (an
    earlier one of the same batch too) gets that job's id, which is returned among the
    ids kept. Call it in the batch's transaction (all or none). Return the stamped calls
    (``PER_JOB_COLUMNS``' order) and those ids."""
    kept: set[str] = set()
    answered: list[tuple[Any, ...]] = []
    for (args, kwargs), (args_json, kwargs_json, *stamp) in zip(calls, stamped, strict=True):
        holder = hold_key(template, args, kwargs, JobStamp(*stamp))
        if holder is None:
            check_enqueue_rate(1)
            if not _insert_own(template.job(args, kwargs, JobStamp(*stamp)), template):
                kept.add(stamp[0])
            answered.append((args_json, kwargs_json, *stamp))
        else:
            kept.add(holder)
            answered.append((args_json, kwargs_json, holder, *stamp[1:]))
    signal(LOOP)
    return answered, kept


def _insert_own(row: Job, template: JobTemplate) -> bool:
    """INSERT ``row``; return False when its id is one of the caller's jobs already.

    That one is kept with ``on_duplicate_id="ignore"``; any other taken id is a
    DuplicateJobId."""
    try:
        with transaction.atomic(using=queue_db()):
            row.save(force_insert=True)
    except IntegrityError:
        owned = Job.objects.filter(pk=row.pk, owner=template.owner).exists()
        if not template.ignore_duplicates or not owned:
            raise DuplicateJobId(row.pk) from None
        return False
    return True

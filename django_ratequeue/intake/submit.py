"""Submit calls of a registered job on behalf of an owner: one or many, all or none."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

from django.db import transaction

from django_ratequeue.engine.models import Job, queue_db
from django_ratequeue.engine.registry import Registered
from django_ratequeue.exceptions import RateLimited
from django_ratequeue.intake.enqueue import Call, enqueue_job, enqueue_rows, item_id
from django_ratequeue.plugins.batches.grouping import BatchBlock, BatchHandle
from django_ratequeue.ratelimit.storage import rate_limit_db
from django_ratequeue.ratelimit.tally import tallied

# What decides a call's own options from its arguments: (args, kwargs) -> options.
CallOptions = Callable[[list[Any], dict[str, Any]], Mapping[str, Any]]


def submit(
    job: Registered,
    call: Call,
    options: Mapping[str, Any],
    *,
    owner: str | None,
    call_options: CallOptions | None = None,
) -> Job:
    """Enqueue one call of ``job`` for ``owner`` and return its row as written.

    ``call_options(args, kwargs)`` adds the call's own options over ``options``; it runs in
    one transaction with the enqueue, so that what it wrote is undone when the enqueue is
    refused (see docs/concepts.md, "Submitting")."""
    args, kwargs = call
    with _all_or_nothing(call_options):
        chosen = _options_of(call, options, owner, call_options)
        return enqueue_job(job.path, args=args, kwargs=kwargs, **chosen)


def submit_many(
    job: Registered,
    calls: list[Call],
    options: Mapping[str, Any],
    *,
    owner: str | None,
    call_options: CallOptions | None = None,
) -> list[Job]:
    """Enqueue ``calls`` of ``job`` for ``owner``, all or none, and return their rows in order.

    As :func:`submit` for each call; with an ``id`` the jobs get the ids ``enqueue_many``
    gives (``id-0``, ``id-1``...), also when ``call_options`` makes their options differ."""
    if not calls:
        return []
    with _all_or_nothing(call_options):
        each = [_options_of(call, options, owner, call_options) for call in calls]
        if all(chosen == each[0] for chosen in each):
            return enqueue_rows(job.path, calls, **each[0])
        return _enqueue_each(job, calls, each)


def submit_batch(
    job: Registered,
    calls: list[Call],
    options: Mapping[str, Any],
    *,
    owner: str | None,
    call_options: CallOptions | None = None,
) -> tuple[list[Job], BatchHandle]:
    """Submit ``calls`` as :func:`submit_many` does, as a new batch of ``owner``'s.

    The batch and its jobs are written in one transaction: all or none."""
    with transaction.atomic(using=queue_db()), BatchBlock(None, None, owner) as batch:
        rows = submit_many(job, calls, options, owner=owner, call_options=call_options)
    return rows, batch


def _options_of(
    call: Call, options: Mapping[str, Any], owner: str | None, call_options: CallOptions | None
) -> dict[str, Any]:
    """Return the options of one call: the caller's, then the call's own, then the owner."""
    own = dict(call_options(*call)) if call_options is not None else {}
    return {**options, **own, "owner": owner}


def _enqueue_each(job: Registered, calls: list[Call], each: list[dict[str, Any]]) -> list[Job]:
    """Enqueue calls whose options differ one by one, in one transaction."""
    rows = []
    with transaction.atomic(using=queue_db()):
        for index, ((args, kwargs), chosen) in enumerate(zip(calls, each, strict=True)):
            if chosen.get("id") is not None:
                chosen = {**chosen, "id": item_id(chosen["id"], index)}
            rows.append(enqueue_job(job.path, args=args, kwargs=kwargs, **chosen))
    return rows


@contextmanager
def atomically() -> Iterator[None]:
    """Run the block in one transaction on each database of the queue and the rate limits.

    What it enqueues and what it draws from limits are then kept or undone together."""
    with ExitStack() as stack:
        for alias in sorted({queue_db(), rate_limit_db()}):
            stack.enter_context(transaction.atomic(using=alias))
        yield


@contextmanager
def _all_or_nothing(call_options: CallOptions | None) -> Iterator[None]:
    """Make the calls all or nothing: one transaction per database when ``call_options`` runs.

    It opens one transaction on each database of the queue and the rate limits; without
    ``call_options`` there is nothing to undo, and each enqueue stays its own
    transaction. A refusal by a limit that the calls together could never fit is a
    ValueError that says so (:mod:`..ratelimit.tally`)."""
    with atomically() if call_options is not None else nullcontext(), tallied() as drawn:
        try:
            yield
        except RateLimited as refused:
            never = drawn.never_fits(refused)
            if never is None:
                raise
            raise ValueError(never) from None

"""Admit an enqueue before it is written: the enqueue rate limit, a rate gate's room."""

from __future__ import annotations

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.capacity import rate_row
from django_ratequeue.exceptions import EnqueueRateLimited
from django_ratequeue.ratelimit.decisions import check_rate_limit, rate_limit

ENQUEUE_LIMIT_NAME = "ratequeue:enqueue"


def check_enqueue_rate(count: int) -> None:
    """Draw ``count`` from ENQUEUE_RATE_LIMIT, or raise :class:`EnqueueRateLimited`.

    ENQUEUE_RATE_LIMIT is a leaky bucket, drawn before anything is written; off when the
    setting is None. It is drawn in the caller's transaction, so a rolled-back enqueue
    gives its tokens back.
    """
    config = ratequeue_settings().ENQUEUE_RATE_LIMIT
    if config is None:
        return
    decision = rate_limit(ENQUEUE_LIMIT_NAME, count=count, config=config)
    if not decision.ok:
        raise EnqueueRateLimited(ENQUEUE_LIMIT_NAME, None, decision.retry_at)


def check_reservation_room(queue: str, cost: int, key: str | None = None) -> None:
    """Refuse work for a rate-gated queue whose limit has reserved ``max_reserved`` tokens.

    Those are tokens reserved ahead already: :class:`RateLimited` says when it would be
    admitted. Only a read; the loop reserves the tokens when the job could start. A keyed
    limit (plan tiers) is read for the job's concurrency ``key``, as the loop draws it."""
    settings = ratequeue_settings()
    config = settings.QUEUES.get(queue)
    limit = config.rate_limit if config else None
    if limit is None or cost == 0:
        return
    row = rate_row(limit, key or "", settings)
    check_rate_limit(limit, key=row, count=cost, reserve=True, throws=True)

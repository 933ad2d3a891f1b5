"""The lease heads: one renewal statement reads every feature's head, by name."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_ratequeue import clock, enqueue, set_max_concurrency
from django_ratequeue.engine.heads import LEASE_HEADS, LeaseHead, register_lease_head
from django_ratequeue.engine.lease import Lease, Renewal
from django_ratequeue.engine.models import queue_db
from django_ratequeue.models import Job, LoopState
from tests.queue import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def renew() -> tuple[Renewal, int]:
    """Renew the lease in a step's transaction; return what it read and its statements."""
    lease = Lease(LoopState.objects.ensure().generation)
    db = queue_db()
    with transaction.atomic(using=db), CaptureQueriesContext(connections[db]) as queries:
        renewal = lease.renew(clock.now())
    assert renewal is not None
    return renewal, len(queries)


def test_one_statement_reads_every_head_by_name() -> None:
    set_max_concurrency(7)
    later = clock.now() + timedelta(hours=1)
    enqueue(jobs.add, args=[1, 2], start_at=later)
    renewal, statements = renew()
    assert statements == 1
    assert set(renewal.heads) == set(LEASE_HEADS)
    assert renewal.max_concurrency == 7
    assert renewal.next_deferred == Job.objects.get().start_at
    assert not renewal.cancels_waiting and renewal.next_schedule is None
    with pytest.raises(AttributeError, match="no lease head named 'next_deferal'"):
        renewal.next_deferal  # noqa: B018


def test_a_head_registered_later_is_read_by_the_next_renewal() -> None:
    for _ in range(3):  # on PostgreSQL, prepared on the server by now
        renew()
    enqueue(jobs.add, args=[1, 2])
    set_max_concurrency(7)
    table = Job._meta.db_table
    head = LeaseHead(
        "jobs_in_test",
        lambda connection: [f"SELECT COUNT(*) FROM {connection.ops.quote_name(table)}"],
    )
    register_lease_head(head)
    try:
        renewal, statements = renew()
        assert (renewal.jobs_in_test, statements) == (1, 1)
        # The heads after it in the order of names read their own columns still.
        assert (renewal.max_concurrency, renewal.next_deferred) == (7, None)
        with pytest.raises(ValueError, match="'jobs_in_test' is registered already"):
            register_lease_head(LeaseHead("jobs_in_test", head.columns))
    finally:
        del LEASE_HEADS["jobs_in_test"]

"""Claims racing each other: eight remote workers claiming at once never take the same
attempt (PostgreSQL's row locks; SQLite writes one transaction at a time)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connections

from django_ratequeue import enqueue_many
from django_ratequeue.engine import protocol
from django_ratequeue.engine.workerkeys import create_key
from tests.queue.steps import leading_loop

pytestmark = pytest.mark.usefixtures("remote_queues")


@pytest.mark.django_db(transaction=True)
def test_eight_workers_claiming_at_once_never_share_an_attempt() -> None:
    key, _secret = create_key("racers", ["gpu"])
    enqueue_many("tests.queue.jobs.add", [[n, n] for n in range(8)], queue="gpu")
    leading_loop().run(30)
    start = threading.Barrier(8)
    results: dict[str, list[int]] = {}

    def race(name: str) -> None:
        mine: list[int] = []
        try:
            start.wait()
            for _ in range(4):
                mine.extend(
                    a.pk
                    for a in protocol.claim_remote(
                        protocol.Claimant.remote(key, name), ["gpu"], [], 2, mine
                    ).attempts
                )
        finally:
            results[name] = mine
            connections.close_all()

    threads = [threading.Thread(target=race, args=(f"w{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    claimed = [pk for pks in results.values() for pk in pks]
    assert len(claimed) == 8
    assert max(Counter(claimed).values()) == 1

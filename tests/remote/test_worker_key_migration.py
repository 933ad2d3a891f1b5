"""Migration 0014: a remote attempt's worker, once the string
``remote:<key prefix>:<key name>/<instance>``, becomes its key (a column) and its
instance. The rows are made by real claims, written back to the old form by the
migration's reverse, then migrated forward again."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from django_ratequeue import enqueue
from django_ratequeue.engine.models import Attempt, WorkerKey
from tests.remote.test_protocol import claim, dispatch

pytestmark = pytest.mark.usefixtures("remote_queues")
BEFORE = [("django_ratequeue", "0013_request_seats")]
AFTER = [("django_ratequeue", "0014_attempt_worker_key")]
TABLE = Attempt._meta.db_table


def migrate(target: list[tuple[str, str]] | None = None) -> None:
    """Migrate the test database to ``target``, or to the latest migrations."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target or executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_remote_workers_become_columns_and_unknown_prefixes_stay(
    worker: APIClient, gpu_key: tuple[WorkerKey, str]
) -> None:
    ids = [enqueue("tests.queue.jobs.add", args=[n, n], queue="gpu").id for n in range(2)]
    dispatch()
    claimed = [claim(worker, worker=name, max=1)[0]["id"] for name in ("w1", "w2")]
    key = gpu_key[0]
    try:
        migrate(BEFORE)
        with connection.cursor() as cursor:  # the old form, as 0013's code wrote it
            cursor.execute(f"SELECT worker FROM {TABLE} WHERE id = %s", [claimed[0]])
            assert cursor.fetchone()[0] == f"remote:{key.prefix}:gpu box/w1"
            # The second's key is gone from under it (another database's key, say).
            cursor.execute(
                f"UPDATE {TABLE} SET worker = %s WHERE id = %s",
                ["remote:00000000:gpu box/w2", claimed[1]],
            )
    finally:
        migrate(AFTER)
        migrate()  # the later migrations too, for the tests that follow
    first, second = (Attempt.objects.get(pk=pk) for pk in claimed)
    assert (first.worker_key_id, first.worker) == (key.pk, "w1")
    assert (second.worker_key_id, second.worker) == (None, "remote:00000000:gpu box/w2")
    assert WorkerKey.objects.filter(pk=key.pk).exists() and len(ids) == 2

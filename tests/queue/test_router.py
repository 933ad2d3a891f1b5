"""The queue honours the project's database router, and its django-q2 broker must share it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import models
from django.db.utils import ConnectionDoesNotExist
from django.test import override_settings

from django_ratequeue import clock
from django_ratequeue.checks.services import check_broker_database
from django_ratequeue.engine import dispatch, wakeup
from django_ratequeue.engine.bulk import update_rows
from django_ratequeue.engine.fairness import keys
from django_ratequeue.engine.models import Job, queue_db
from django_ratequeue.engine.runner import Runner
from django_ratequeue.monitor import counts

ROUTER = f"{__name__}.QueueElsewhere"


class QueueElsewhere:
    """Sends ratequeue's models to the alias "elsewhere", and nothing else anywhere."""

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        return "elsewhere" if model._meta.app_label == "django_ratequeue" else None

    db_for_read = db_for_write


def broker_problems(**q_cluster: Any) -> list[tuple[str, str]]:
    with override_settings(Q_CLUSTER={"name": "test", **q_cluster}):
        return [(error.id or "", error.msg) for error in check_broker_database()]


def test_the_queue_database_is_the_routers_choice() -> None:
    assert queue_db() == "default"
    with override_settings(DATABASE_ROUTERS=[ROUTER]):
        assert queue_db() == "elsewhere"


def test_an_orm_broker_on_the_queues_database_passes() -> None:
    assert broker_problems(orm="default") == []
    assert broker_problems() == []  # another broker (Redis...): nothing to share
    with override_settings(DATABASE_ROUTERS=[ROUTER]):
        assert broker_problems(orm="elsewhere") == []


def test_an_orm_broker_on_another_database_is_refused() -> None:
    [(error_id, message)] = broker_problems(orm="other")
    assert error_id == "django_ratequeue.E302"
    assert "'other'" in message and "'default'" in message
    with override_settings(DATABASE_ROUTERS=[ROUTER]):
        [(error_id, message)] = broker_problems(orm="default")
    assert error_id == "django_ratequeue.E302"
    assert "'elsewhere'" in message


@pytest.mark.parametrize(
    "raw_sql",
    [
        lambda: wakeup.signal(wakeup.LOOP),
        lambda: wakeup.Waiter((wakeup.LOOP,)).wait(0),
        lambda: Runner("a-worker").claim(),
        lambda: dispatch.waiting_queues(),
        lambda: keys.keys_in_turn({"q": (None, 5)}),
        lambda: keys.next_jobs({("q", ""): 1}),
        lambda: update_rows(Job, [Job(pk="x")], ["status"]),
        lambda: counts.queue_names(),
        lambda: clock._measure(None),
    ],
    ids=[
        "signal",
        "waiter",
        "claim",
        "waiting queues",
        "keys",
        "next jobs",
        "update rows",
        "queue names",
        "database clock",
    ],
)
def test_the_queues_raw_sql_goes_where_the_router_sends_its_models(
    raw_sql: Callable[[], object],
) -> None:
    """The alias "elsewhere" does not exist: each statement reaches for it, rather than
    for the default connection, and finds it missing."""
    with override_settings(DATABASE_ROUTERS=[ROUTER]), pytest.raises(ConnectionDoesNotExist):
        raw_sql()

"""Per-key limits (set_key_limit, a queue's key_limits function) and weighted turns, run
step by step with the loop in this process, counting the attempts each step starts."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_ratequeue import (
    RecursiveWaitDeadlock,
    clock,
    enqueue_many,
    refresh_key_limits,
    set_key_limit,
)
from django_ratequeue.engine.heartbeat import beat
from django_ratequeue.engine.models import Wait
from django_ratequeue.engine.runner import Runner
from django_ratequeue.engine.subtasks import check_wait
from django_ratequeue.models import Attempt, Job, KeyLimit, KeyLimitChange, RuntimeLimits
from tests.cluster import wait_for
from tests.queue import jobs, key_plans
from tests.queue.backlog import waiting
from tests.queue.steps import leading_loop


def running_per_key() -> Counter[str]:
    running = Attempt.objects.filter(active=True, ended_at=None)
    return Counter(running.values_list("concurrency_key", flat=True))


def step() -> Counter[str]:
    """One loop step (a new leader each time: the turns live in TurnState); what runs."""
    leading_loop().step()
    return running_per_key()


def starts(steps: int) -> list[str]:
    """Step and run what started, ``steps`` times; the key of each start, in order."""
    order: list[str] = []
    for _ in range(steps):
        mark = Attempt.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        leading_loop().step()
        started = Attempt.objects.filter(pk__gt=mark).order_by("pk")
        order += started.values_list("concurrency_key", flat=True)
        Runner(beat(force=True)).drain()
    return order


@pytest.fixture
def plans() -> Iterator[dict[str, object]]:
    key_plans.PLANS.clear()
    key_plans.CALLS.clear()
    yield key_plans.PLANS
    key_plans.PLANS.clear()


BAD_INPUTS = [
    ({"max_concurrency": math.inf}, "max_concurrency of key 'a'"),
    ({"max_concurrency": math.nan}, "max_concurrency of key 'a'"),
    ({"max_concurrency": True}, "max_concurrency of key 'a'"),
    ({"max_concurrency": -1}, "from 0 to 100"),
    ({"max_concurrency": 10**12}, "from 0 to 100"),
    ({"max_concurrency": 2.0}, "must be an integer"),
    ({"weight": 0}, "weight of key 'a' in queue 't' must be an integer from 1 to 1000"),
    ({"weight": -3}, "weight of key 'a'"),
    ({"weight": 1001}, "from 1 to 1000"),
    ({"weight": 1.5}, "weight of key 'a'"),
    ({"weight": False}, "weight of key 'a'"),
    ({"weight": math.inf}, "weight of key 'a'"),
    ({"key": "a\x00b"}, "NUL"),
    ({"key": "\udce9"}, "lone surrogate"),
    ({"key": "k" * 256}, "at most 255 characters"),
    ({"key": None}, "A concurrency key must be a string"),
    ({"key": 7}, "A concurrency key must be a string"),
    ({"queue": ""}, "A queue name must be a non-empty string"),
    ({"queue": None}, "A queue name must be a non-empty string"),
    ({"changed_by": "x\x00"}, "changed_by"),
    ({"changed_by": 5}, "changed_by must be a string"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("bad", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_a_clear_error_and_writes_nothing(bad, message) -> None:
    arguments = {"queue": "t", "key": "a", "max_concurrency": 2, "weight": 1, **bad}
    queue, key = arguments.pop("queue"), arguments.pop("key")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        set_key_limit(queue, key, **arguments)
    assert not KeyLimit.objects.exists() and not KeyLimitChange.objects.exists()


@pytest.mark.django_db
def test_set_key_limit_stores_exactly_what_is_given_and_records_each_change() -> None:
    version = RuntimeLimits.ensure().key_limits_version
    row = set_key_limit("t", "acme", max_concurrency=5, weight=3, changed_by="ops")
    assert row is not None and (row.max_concurrency, row.weight) == (5, 3)
    set_key_limit("t", "acme", max_concurrency=5, weight=3)  # no change: nothing recorded
    set_key_limit("t", "acme", weight=2)  # max_concurrency back to its default
    assert KeyLimit.objects.values_list("max_concurrency", "weight").get() == (None, 2)
    assert set_key_limit("t", "acme") is None  # nothing left to override: the row goes
    assert not KeyLimit.objects.exists()
    changes = KeyLimitChange.objects.order_by("pk").values_list(
        "changed_by", "old_max_concurrency", "new_max_concurrency", "old_weight", "new_weight"
    )
    assert list(changes) == [
        ("ops", None, 5, None, 3),
        ("", 5, None, 3, 2),
        ("", None, None, 2, None),
    ]
    assert RuntimeLimits.objects.get().key_limits_version == version + 3
    set_key_limit("t", "", max_concurrency=0)  # the jobs without a key, paused
    assert KeyLimit.objects.get().key == ""


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"tenants": {"max_concurrency": 1}}})
def test_a_raised_key_limit_is_used_at_the_next_step_and_a_lowered_one_never_exceeded() -> None:
    waiting("tenants", ["a", "b"], per_key=20)
    loop = leading_loop()  # one leader throughout: its cache must see the changes
    loop.step()
    assert running_per_key() == {"a": 1, "b": 1}
    set_key_limit("tenants", "a", max_concurrency=4)
    loop.step()
    assert running_per_key() == {"a": 4, "b": 1}
    set_key_limit("tenants", "a", max_concurrency=2)
    loop.step()
    assert running_per_key() == {"a": 4, "b": 1}  # running jobs finish; none start
    for _ in range(4):
        Runner(beat(force=True)).drain()
        loop.step()
        assert running_per_key()["a"] <= 2
    assert running_per_key()["a"] == 2
    set_key_limit("tenants", "a", max_concurrency=0)  # none of a's start any more
    Runner(beat(force=True)).drain()
    loop.step()
    assert running_per_key() == {"b": 1}


@pytest.mark.django_db
@override_settings(
    RATEQUEUE={
        "MAX_CONCURRENCY": 50,
        "QUEUES": {
            "tenants": {
                "max_concurrency": 1,
                "key_weight": 1,
                "key_limits": "tests.queue.key_plans.key_limits",
            }
        },
    }
)
def test_the_queues_function_gives_limits_a_row_overrides_and_refresh_rereads(plans) -> None:
    plans.update(gold={"max_concurrency": 3}, silver={"max_concurrency": 2, "weight": 2})
    plans.update(odd={"max_concurrency": "lots", "weight": 0}, bad="no")
    waiting("tenants", ["gold", "silver", "odd", "bad", "boom", "free"], per_key=5)
    loop = leading_loop()
    loop.step()
    expected = {"gold": 3, "silver": 2, "odd": 1, "bad": 1, "boom": 1, "free": 1}
    assert running_per_key() == expected  # answers that cannot be limits: the defaults
    set_key_limit("tenants", "gold", max_concurrency=4)  # a row wins over the function
    loop.step()
    assert running_per_key() == {**expected, "gold": 4}
    calls = dict(key_plans.CALLS)
    plans["free"] = {"max_concurrency": 2}  # the plan changes: the cached answer holds
    loop.step()
    assert running_per_key() == {**expected, "gold": 4}
    assert calls == key_plans.CALLS
    refresh_key_limits()  # until the app says so
    loop.step()
    assert running_per_key() == {**expected, "gold": 4, "free": 2}
    assert key_plans.CALLS["free"] == calls["free"] + 1
    assert key_plans.CALLS["gold"] == calls["gold"]  # its row answers


@pytest.mark.django_db
@override_settings(RATEQUEUE={"QUEUES": {"solo": {"max_concurrency": 1}}})
def test_a_subtask_wait_counts_the_slots_of_its_keys_own_limit() -> None:
    """Key "a" may run 2: one slot lent to a waiting parent leaves another for the child."""
    set_key_limit("solo", "a", max_concurrency=2)
    waiting("solo", ["a", "b"], per_key=3)
    step()  # job-a-0, job-a-1 and job-b-0 run
    lender = Attempt.objects.get(job_id="job-a-0")
    lender.wait, lender.wait_queue = Wait.WAITING, "solo"
    lender.save()
    parent = Attempt.objects.get(job_id="job-a-1")
    check_wait(parent, Job.objects.get(pk="job-a-2"))  # a's second slot: no deadlock
    parent.wait, parent.wait_queue = Wait.WAITING, "solo"
    parent.save()  # now both of a's slots are lent
    with pytest.raises(RecursiveWaitDeadlock, match="2 slot\\(s\\) are all lent"):
        check_wait(Attempt.objects.get(job_id="job-b-0"), Job.objects.get(pk="job-a-2"))
    set_key_limit("solo", "b", max_concurrency=0)
    with pytest.raises(RecursiveWaitDeadlock, match="whose key's limit is 0"):
        check_wait(parent, Job.objects.get(pk="job-b-1"))


WEIGHTED = {
    "MAX_CONCURRENCY": 50,
    "QUEUES": {"w": {"max_concurrency": 50, "total_concurrency": 1}},
}


@pytest.mark.django_db
@override_settings(RATEQUEUE=WEIGHTED)
def test_backlogged_keys_share_the_starts_by_weight() -> None:
    """One start per step (total_concurrency 1): every 7 starts, 1, 2 and 4."""
    waiting("w", ["a", "b", "c"], per_key=20)
    set_key_limit("w", "b", weight=2)
    set_key_limit("w", "c", weight=4)
    order = starts(21)
    for turn in range(3):
        assert Counter(order[7 * turn : 7 * turn + 7]) == {"a": 1, "b": 2, "c": 4}


@pytest.mark.django_db
@override_settings(RATEQUEUE={**WEIGHTED, "QUEUES": {"w": {"max_concurrency": 50,
                   "total_concurrency": 3, "key_weight": 2}}})  # fmt: skip
def test_weights_hold_with_several_starts_per_step_and_the_queues_default_weight() -> None:
    waiting("w", ["a", "b", "c"], per_key=30)
    set_key_limit("w", "a", weight=1)  # b and c: the queue's key_weight, 2
    order = starts(10)  # three starts per step
    assert len(order) == 30
    assert Counter(order[:25]) == {"a": 5, "b": 10, "c": 10}


@pytest.mark.django_db
@override_settings(RATEQUEUE=WEIGHTED)
def test_a_tenant_spreading_work_over_many_keys_cannot_starve_another() -> None:
    """Under the total cap, the one key still gets its turn once per round of 40 keys."""
    waiting("w", [f"spread-{n:02}" for n in range(40)], per_key=3)
    waiting("w", ["solo"], per_key=5)
    order = starts(90)
    solo = [position for position, key in enumerate(order) if key == "solo"]
    assert len(solo) >= 2
    assert all(later - earlier <= 41 for earlier, later in itertools.pairwise(solo))


@pytest.mark.django_db
def test_the_checks_refuse_a_bad_weight_and_a_key_limits_that_is_no_path() -> None:
    queues = {"a": {"key_weight": 0}, "b": {"key_limits": "nodots"}, "c": {"key_weight": 3}}
    with override_settings(RATEQUEUE={"QUEUES": queues}):
        found = [(m.id, m.msg) for m in checks.run_checks() if "E22" in (m.id or "")]
    assert sorted(check_id for check_id, _message in found) == [
        "django_ratequeue.E224",
        "django_ratequeue.E225",
    ]
    messages = " ".join(message for _id, message in found)
    assert "['a']['key_weight'] must be an integer from 1 to 1000, not 0" in messages
    assert "['b']['key_limits'] must be the dotted path of a function" in messages


@pytest.mark.django_db
def test_the_checks_refuse_a_key_limits_function_that_does_not_import() -> None:
    queues = {
        "c": {"key_limits": "tests.queue.key_plans.missing"},
        "d": {"key_limits": "tests.queue.key_plans.NOT_CALLABLE"},
        "e": {"key_limits": "tests.queue.key_plans.key_limits"},
    }
    with override_settings(RATEQUEUE={"QUEUES": queues}):
        found = [m.msg for m in checks.run_checks() if m.id == "django_ratequeue.E225"]
    assert len(found) == 2, found
    assert "['c']" in found[0] and "cannot be imported" in found[0]
    assert "['d']" in found[1] and "not a function" in found[1]


def running_at(moment, spans) -> int:  # type: ignore[no-untyped-def]
    """How many of ``spans`` (started, ended) were running at ``moment``."""
    return sum(start <= moment and (end is None or moment < end) for start, end in spans)


def test_key_limit_changes_reach_a_running_cluster(cluster) -> None:
    """A raised limit is used, a lowered one never exceeded: counted from the attempts'
    rows (when each started and ended), not from timings."""
    cluster(QUEUES={"tenants": {"max_concurrency": 1}})
    handles = enqueue_many(jobs.sleep, [[0.3]] * 24, queue="tenants", concurrency_key="a")
    started = Attempt.objects.filter(queue="tenants", started_at__isnull=False)
    wait_for(started.exists, message="a first start")
    set_key_limit("tenants", "a", max_concurrency=4)
    wait_for(lambda: started.filter(ended_at=None).count() == 4, message="four running")
    set_key_limit("tenants", "a", max_concurrency=2, changed_by="test")
    lowered_at = clock.now()
    for handle in handles:
        handle.result(timeout=60)
    rows = list(started.values_list("dispatched_at", "started_at", "ended_at"))
    spans = [(start, end) for _dispatched, start, end in rows]
    after = [start for dispatched, start, _end in rows if dispatched > lowered_at]
    assert len(after) >= 5  # most of the 24 started after the change
    assert max(running_at(start, spans) for start in after) <= 2
    assert max(running_at(start, spans) for start in (s for s, _e in spans)) == 4


@pytest.mark.django_db
def test_the_command_sets_and_clears_a_key_limit() -> None:
    out = StringIO()
    call_command("ratequeue_key_limit", "llm", "acme", "--weight", "3", stdout=out)
    shown = "Key 'acme' of queue 'llm': max_concurrency default, weight 3."
    assert out.getvalue().strip() == shown
    assert KeyLimitChange.objects.get().changed_by == "manage.py ratequeue_key_limit"
    with pytest.raises(CommandError, match="weight of key 'acme' in queue 'llm'"):
        call_command("ratequeue_key_limit", "llm", "acme", "--weight", "0")
    call_command("ratequeue_key_limit", "llm", "acme", "--by", "ops", stdout=out)
    assert not KeyLimit.objects.exists()
    assert KeyLimitChange.objects.latest("pk").changed_by == "ops"

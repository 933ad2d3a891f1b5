"""A plug-in joins the loop through declared hooks: its phases run where it placed them."""

from __future__ import annotations

import pytest

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import handles, hooks, options
from django_ratequeue.engine.phases import Step
from django_ratequeue.plugins import PLUGINS
from django_ratequeue.plugins.retention import pruning
from tests.queue import jobs
from tests.queue.steps import Clock, freeze, leading_loop

pytestmark = pytest.mark.django_db(transaction=True)


class Probe:
    """A plug-in's phase that notes each step it saw, and what the phases before it did."""

    def __init__(self, seen: list[tuple[str, int]], label: str) -> None:
        self.seen, self.label = seen, label

    def __call__(self, step: Step) -> None:
        self.seen.append((self.label, len(step.started)))


def test_a_plugins_phases_run_just_before_and_after_the_phase_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, int]] = []

    def phases(settings: object) -> list[hooks.Placed]:
        return [
            hooks.Placed(Probe(seen, "before start"), before="start"),
            hooks.Placed(Probe(seen, "after start"), after="start"),
        ]

    monkeypatch.setitem(hooks._phase_builders, "probe", phases)
    freeze(monkeypatch)
    jobs.add.enqueue(1, 2)
    loop = leading_loop()
    names = [getattr(p, "__name__", type(p).__name__) for p in loop.phases]
    start = names.index("Start")
    # After the batches' phases placed at the same sides (declared earlier), before start
    # and right after it.
    assert names[start - 1] == "Probe" and names[start + 2] == "Probe"
    loop.step()
    assert seen == [("before start", 0), ("after start", 1)]


def test_a_phase_placed_at_a_phase_the_engine_has_not_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def phases(settings: object) -> list[hooks.Placed]:
        return [hooks.Placed(Probe([], "x"), after="dispatch")]

    monkeypatch.setattr(hooks, "_phase_builders", {"probe": phases})
    with pytest.raises(LookupError, match=r"'probe' places a phase at 'dispatch'.*start"):
        hooks.place([("start", Probe([], "start"))], ratequeue_settings())


def test_a_phase_is_placed_on_one_side_of_one_phase() -> None:
    with pytest.raises(ValueError, match="either before or after"):
        hooks.Placed(Probe([], "x"), before="start", after="rest")
    with pytest.raises(ValueError, match="either before or after"):
        hooks.Placed(Probe([], "x"))


def test_idle_work_runs_after_a_step_that_did_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen: Clock = freeze(monkeypatch)
    calls: list[int] = []
    monkeypatch.setitem(hooks._idle_work, "probe", lambda: calls.append(1))
    loop = leading_loop()
    loop.step()  # the new leader's first step syncs the schedules: it may do work
    loop.step()
    assert calls
    calls.clear()
    jobs.add.enqueue(1, 2)
    frozen.advance(1)
    assert loop.step() is True
    assert calls == []


def test_the_loaded_plugins_are_the_ones_that_declare_hooks() -> None:
    declared = {
        *hooks._phase_builders,
        *hooks._idle_work,
        *options._option_checks,
        *(plugin for plugin, _ in options._context_columns.values()),
        *([handles._estimator[0]] if handles._estimator else []),
        *hooks._prunings,
        *hooks._kept_jobs,
        *([hooks._run_times[0]] if hooks._run_times else []),
    }
    assert set(PLUGINS) <= declared


def test_retention_runs_each_declared_pruning_until_it_prunes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    left = [3]

    def prune_probe(limit: int) -> int:
        calls.append(limit)
        pruned = min(left[0], 2)
        left[0] -= pruned
        return pruned

    monkeypatch.setitem(hooks._prunings, "probe", prune_probe)
    pruning.prune(batch_size=2)
    assert calls == [2, 2, 2]  # 2, then 1, then none left
    calls.clear()
    monkeypatch.setattr(pruning, "_next_background_prune", 0.0)
    pruning.prune_in_background()
    assert calls == [pruning.BACKGROUND_BATCH]  # one batch a rest

"""The hooks by which a plug-in joins the engine: the loop, the enqueue, the handle.

The engine names no plug-in. A plug-in declares here its phases, each placed just before
or just after one of the engine's own phases (:data:`.phases.ENGINE_PHASES` names them),
and its work for a step that did nothing; its check of the enqueue options and the hold
it asks of each job (:func:`add_option_check`), a column stamped from the enqueuing
context (:func:`add_context_column`), and the estimate ``Handle.eta()`` gives
(:func:`set_estimator`). Between plug-ins: how retention prunes a plug-in's rows
(:func:`add_pruning`) and which jobs it keeps for one (:func:`add_kept_jobs`), and the
queues' run times an estimate reads (:func:`set_run_times`). ``django_ratequeue.plugins``
loads the plug-ins as the app starts. docs/concepts.md ("Where the engine lives") tells
the design.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine.handles import set_estimator
from django_ratequeue.engine.options import Hold, add_context_column, add_option_check

if TYPE_CHECKING:
    from django_ratequeue.engine.phases import Step

Phase = Callable[["Step"], None]


@dataclass(frozen=True)
class Placed:
    """A plug-in's phase, to run just ``before`` or just ``after`` the engine phase named."""

    phase: Phase
    before: str = ""
    after: str = ""

    def __post_init__(self) -> None:
        if bool(self.before) == bool(self.after):
            raise ValueError("A phase is placed either before or after one engine phase.")


# A plug-in's phases for one loop, built anew for each leader from the settings.
PhaseBuilder = Callable[[RateQueueSettings], Iterable[Placed]]

_phase_builders: dict[str, PhaseBuilder] = {}
_idle_work: dict[str, Callable[[], None]] = {}


def add_phases(plugin: str, build: PhaseBuilder) -> None:
    """Declare the phases ``plugin`` adds to every step (declaring again replaces them)."""
    _phase_builders[plugin] = build


def add_idle_work(plugin: str, work: Callable[[], None]) -> None:
    """Declare what ``plugin`` does after a step that did no work (the loop is at rest)."""
    _idle_work[plugin] = work


# A plug-in's pruning of its own rows: delete up to ``limit`` of those past their
# retention, in one transaction; return how many.
Prune = Callable[[int], int]
# The jobs retention keeps for a plug-in past their own retention: a query of their ids.
KeptJobs = Callable[[], QuerySet[Any]]
# A queue's mean run time at a moment, in seconds (None: none known).
RunTimes = Callable[[str, datetime], float | None]

_prunings: dict[str, Prune] = {}
_kept_jobs: dict[str, KeptJobs] = {}
_run_times: tuple[str, RunTimes] | None = None


def add_pruning(plugin: str, prune: Prune) -> None:
    """Declare how retention prunes ``plugin``'s rows, ``limit`` at a time."""
    _prunings[plugin] = prune


def add_kept_jobs(plugin: str, kept: KeptJobs) -> None:
    """Declare the jobs retention keeps for ``plugin`` while ``kept()`` returns their ids."""
    _kept_jobs[plugin] = kept


def set_run_times(plugin: str, run_times: RunTimes) -> None:
    """Make :func:`run_time` answer with ``plugin``'s ``run_times(queue, now)``."""
    global _run_times
    _run_times = (plugin, run_times)


def prunings() -> list[Prune]:
    """Return every plug-in's pruning, in the order they were declared."""
    return list(_prunings.values())


def kept_jobs() -> list[QuerySet[Any]]:
    """Return the ids of the jobs each plug-in asks retention to keep, a query each."""
    return [kept() for kept in _kept_jobs.values()]


def run_time(queue: str, now: datetime) -> float | None:
    """Return ``queue``'s mean run time at ``now``, in seconds (None: none known)."""
    return None if _run_times is None else _run_times[1](queue, now)


def place(engine: Iterable[tuple[str, Phase]], settings: RateQueueSettings) -> list[Phase]:
    """Return the engine's phases with every plug-in's placed among them, in order.

    Of the phases placed at the same side of one engine phase, the plug-in declared
    first runs first."""
    names = [name for name, _ in engine]
    before: dict[str, list[Phase]] = {name: [] for name in names}
    after: dict[str, list[Phase]] = {name: [] for name in names}
    for plugin, build in _phase_builders.items():
        for placed in build(settings):
            anchor = placed.before or placed.after
            if anchor not in before:
                raise LookupError(
                    f"The plug-in {plugin!r} places a phase at {anchor!r}, which is not one"
                    f" of the engine's phases: {', '.join(names)}."
                )
            (before if placed.before else after)[anchor].append(placed.phase)
    return [p for name, phase in engine for p in (*before[name], phase, *after[name])]


def do_idle_work() -> None:
    """Do every plug-in's work for a step that did no work."""
    for work in _idle_work.values():
        work()


__all__ = [
    "Hold",
    "Placed",
    "add_context_column",
    "add_idle_work",
    "add_kept_jobs",
    "add_option_check",
    "add_phases",
    "add_pruning",
    "do_idle_work",
    "kept_jobs",
    "place",
    "prunings",
    "run_time",
    "set_estimator",
    "set_run_times",
]

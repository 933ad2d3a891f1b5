"""The hooks by which a plug-in joins the engine: the loop, the enqueue, the handle.

The engine names no plug-in. A plug-in declares here its phases, each placed just before
or just after one of the engine's own phases (:data:`.phases.ENGINE_PHASES` names them),
and its work for a step that did nothing; its check of the enqueue options and the hold
it asks of each job (:func:`add_option_check`), a column stamped from the enqueuing
context (:func:`add_context_column`), and the estimate ``Handle.eta()`` gives
(:func:`set_estimator`). ``django_ratequeue.plugins`` loads the plug-ins as the app
starts. docs/concepts.md ("Where the engine lives") tells the design.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    "add_option_check",
    "add_phases",
    "do_idle_work",
    "place",
    "set_estimator",
]

"""How the batches join the engine: a new job's batch, a phase that ends batches, their pruning."""

from __future__ import annotations

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine import hooks
from django_ratequeue.engine.phases import Step
from django_ratequeue.plugins.batches.ends import BatchEnds
from django_ratequeue.plugins.batches.pruning import prune_batches
from django_ratequeue.plugins.batches.scope import current_batch_id


class EndBatches:
    """Finish the batches whose last job ended in the step (docs/batches.md).

    Run before the starts, so that their callbacks start in the same step, and again
    after them (``after_start``), for the jobs the dispatch failed: then the loop steps
    again at once to start those callbacks."""

    def __init__(self, ends: BatchEnds, after_start: bool = False) -> None:
        self.ends = ends
        self.after_start = after_start

    def __call__(self, step: Step) -> None:
        if self.ends(step.now, step.moves):
            step.did_work = True
            step.more_work |= self.after_start


def phases(settings: RateQueueSettings) -> list[hooks.Placed]:
    """Return the batches' phases for one loop: one end of batches on each side of start."""
    ends = BatchEnds(settings)
    return [
        hooks.Placed(EndBatches(ends), before="start"),
        hooks.Placed(EndBatches(ends, after_start=True), after="start"),
    ]


hooks.add_context_column("batches", "batch_id", current_batch_id)
hooks.add_phases("batches", phases)
hooks.add_pruning("batches", prune_batches)

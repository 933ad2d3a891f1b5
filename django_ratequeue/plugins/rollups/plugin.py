"""How the rollups join the engine: each step's arrivals and moves, counted as it commits.

Retention prunes their old minutes; the eta reads the queues' run times from them."""

from __future__ import annotations

from datetime import datetime, timedelta

from django_ratequeue.conf import RateQueueSettings
from django_ratequeue.engine import hooks
from django_ratequeue.engine.models import Job
from django_ratequeue.engine.phases import Step
from django_ratequeue.plugins.rollups.counting import ARRIVALS_SETTLE, ArrivalsWindow, Tally
from django_ratequeue.plugins.rollups.pruning import prune_rollups
from django_ratequeue.plugins.rollups.runtimes import run_time


class Rollups:
    """Count a step's arrivals and moves in the per-minute figures (two phases).

    :meth:`arrivals`, before the rest, opens the window of arrivals the step counts and
    asks the resting loop to wake when the first job not counted yet has settled;
    :meth:`count`, after it, writes the figures and moves the cursor."""

    def __init__(self) -> None:
        self.window: ArrivalsWindow | None = None
        # The creation of the first job not counted yet, as last read (None: not known).
        self.first_uncounted: datetime | None = None

    def arrivals(self, step: Step) -> None:
        """Open the step's window of arrivals; step again at once if more are settled."""
        self.window = ArrivalsWindow.at(step.now, step.renewal.arrivals_until)
        step.more_work |= self.window.behind
        step.wakes.append(self.next_count)

    def next_count(self) -> datetime | None:
        """Return when the first job not counted yet has settled (None: there is none)."""
        assert self.window is not None
        uncounted = self.first_uncounted_arrival(self.window.until)
        if uncounted is None:
            return None
        return uncounted.replace(microsecond=0) + timedelta(seconds=1) + ARRIVALS_SETTLE

    def first_uncounted_arrival(self, counted_until: datetime) -> datetime | None:
        """Return the creation of the first job the rollups have not counted yet, if any.

        Read again only once that job is counted (a later one cannot wake the loop
        sooner)."""
        known = self.first_uncounted
        if known is None or known < counted_until:
            self.first_uncounted = known = first_arrival_since(counted_until)
        return known

    def count(self, step: Step) -> None:
        """Add the step's arrivals and moves to the rollups; move the arrivals' cursor."""
        assert self.window is not None
        tally = Tally(step.now)
        tally.count_arrivals(self.window.since, self.window.until)
        tally.record(step.moves)
        tally.write()
        self.window.record()


def first_arrival_since(moment: datetime) -> datetime | None:
    """Return the creation time of the first job created at ``moment`` or later.

    Read through the jobs' creation index."""
    return (
        Job.objects.filter(created_at__gte=moment)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def phases(settings: RateQueueSettings) -> list[hooks.Placed]:
    """Return the rollups' phases for one loop: the window before the rest, the count after."""
    rollups = Rollups()
    return [
        hooks.Placed(rollups.arrivals, before="rest"),
        hooks.Placed(rollups.count, after="rest"),
    ]


hooks.add_phases("rollups", phases)
hooks.add_pruning("rollups", prune_rollups)
hooks.set_run_times("rollups", run_time)

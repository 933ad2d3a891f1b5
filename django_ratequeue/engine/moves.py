"""What a loop step did to jobs and attempts, as its transitions report it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django_ratequeue.engine.models import Attempt, Job


@dataclass
class Moves:
    """Record the jobs and attempts one step moved on, for the rollups to count.

    The transitions say what happened in their own words (this job finished, that
    attempt ran); :meth:`.rollups.Tally.record` turns it into figures.
    """

    # Jobs that reached a final status (their ``status`` says which).
    finished: list[Job] = field(default_factory=list)
    # Attempts that ended after they had started, with their job (their run time counts).
    ran: list[tuple[Job, Attempt]] = field(default_factory=list)
    # Jobs whose attempt failed and which were scheduled for another try.
    retried: list[Job] = field(default_factory=list)
    # Jobs whose attempt was dispatched, each with the time it had been ready since.
    started: list[tuple[Job, datetime]] = field(default_factory=list)
    # Jobs whose cost was reserved from their queue's rate limit.
    reserved: list[Job] = field(default_factory=list)

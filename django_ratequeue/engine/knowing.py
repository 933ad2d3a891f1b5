"""Which live workers know which job functions: a deploy never fails a job.

Each worker process says in its heartbeat row which functions it knows (the jobs
registered there, :func:`.heartbeat.beat`), and its runner claims only attempts of those.
An attempt of a function that no live worker knows (a newer deploy enqueued it) is no
try: it stays dispatched, waiting, until a worker that knows it claims it, or until
``UNKNOWN_JOB_PATIENCE`` has passed since its dispatch with none, when recovery fails its
job with :class:`~django_ratequeue.exceptions.UnknownJob`. docs/concepts.md ("Deploys")
tells why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from datetime import datetime

from django.db.models import QuerySet

from django_ratequeue.engine.heartbeat import live_functions
from django_ratequeue.engine.models import Attempt

# The functions the dashboard lists at most.
FUNCTIONS_SHOWN = 20


def no_worker_note(func: str) -> str:
    """Return what a job waiting for a worker that knows its function shows."""
    return f"no running worker knows `{func}`"


class Knowing:
    """Tell which live workers know a function, reading their heartbeats once, when asked."""

    def __init__(self, now: datetime, live: dict[str, frozenset[str]] | None = None) -> None:
        self.now = now
        # The functions of each live worker, by id: given (already read), or read once.
        self._live = live

    @property
    def live(self) -> dict[str, frozenset[str]]:
        """Return the functions each live worker knows, by worker id (read once)."""
        if self._live is None:
            self._live = live_functions(self.now)
        return self._live

    def known(self, func: str, among: Collection[str] | None = None) -> bool:
        """Return whether a live worker (of ``among``, if given) knows ``func``."""
        return any(
            func in functions
            for worker, functions in self.live.items()
            if among is None or worker in among
        )

    def note(self, func: str, unclaimed: bool) -> str:
        """Return why a job of ``func`` waits, if its attempt is ``unclaimed`` because no
        live worker knows ``func``; else ""."""
        return no_worker_note(func) if unclaimed and not self.known(func) else ""


def unclaimed_local() -> QuerySet[Attempt]:
    """Return the local attempts dispatched and not claimed yet (a queryset)."""
    return Attempt.objects.filter(active=True, remote=False, worker="", ended_at=None)


def job_note(job_id: str, func: str, now: datetime) -> str:
    """Return why the job ``job_id`` of ``func`` waits for a worker that knows it, or ""."""
    unclaimed = unclaimed_local().filter(job_id=job_id).exists()
    return Knowing(now).note(func, unclaimed)


def unknown_functions(
    now: datetime, live: dict[str, frozenset[str]] | None = None
) -> list[tuple[str, int]]:
    """Return the functions whose jobs wait because no live worker knows them, with how
    many wait, the most first (at most FUNCTIONS_SHOWN).

    ``live``: the functions of each live worker, if the caller read them already."""
    waiting = Counter(unclaimed_local().values_list("job__func", flat=True)[:10_000])
    if not waiting:
        return []
    knowing = Knowing(now, live)
    unknown = [(func, n) for func, n in waiting.items() if not knowing.known(func)]
    return sorted(unknown, key=lambda item: (-item[1], item[0]))[:FUNCTIONS_SHOWN]

"""The workers as people see them: live local processes and remote workers by key."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.jobs import Status, any_alive, declared, running_per_instance, served_queues
from django_ratequeue.models import Job, WorkerHeartbeat, WorkerKey


@dataclass(frozen=True)
class Worker:
    """A live local worker process, from its heartbeat.

    ``running`` is the attempts it has started and runs now, None where not read (the
    queue overview alone does not read the attempts; the dashboard's snapshot does).
    """

    id: str
    host: str
    pid: int
    seen_at: datetime
    serving: bool  # a runner serves the queue in it now
    leads: bool  # its agent leads the loop
    running: int | None = None
    # The job functions registered in it (its heartbeat says so).
    functions: frozenset[str] = frozenset()
    # The slots its runner serves with (0: none serves, or its heartbeat predates them).
    slots: int = 0

    @property
    def roles(self) -> str:
        """Return what it does, in words: "leads the loop, runner serving 8 slots"."""
        runner = f"runner serving {self.slots} slots" if self.slots else "runner serving"
        roles = (("leads the loop", self.leads), (runner, self.serving))
        return ", ".join(role for role, on in roles if on)


@dataclass(frozen=True)
class RemoteWorker:
    """The remote workers of one key not revoked, and what they hold now.

    Where and when the key was last used, and the worker instances that hold attempts
    now, with how many each."""

    key: str  # its name
    prefix: str
    queues: list[str]
    host: str
    last_seen: datetime | None
    instances: dict[str, int]

    @property
    def running(self) -> int:
        """Return the attempts the key's workers run now."""
        return sum(self.instances.values())


@dataclass(frozen=True)
class NoWorker:
    """The workers missing: none of django-q2's alive, or none for remote queues that wait.

    ``local``: no django-q2 worker process is alive (nothing leads the loop, nothing
    starts); ``remote_queues``: the remote queues with waiting jobs that no remote worker
    was seen claiming from lately."""

    local: bool
    remote_queues: list[str]

    def __bool__(self) -> bool:
        return self.local or bool(self.remote_queues)


def no_worker(alive: bool | None = None, waiting: Collection[str] | None = None) -> NoWorker:
    """Return which workers are missing (false when none is).

    ``alive``: whether a local worker is (:func:`live_workers` found one); ``waiting``:
    the queues with waiting jobs. Each is read when not given."""
    remote = {name for name, config in ratequeue_settings().QUEUES.items() if config.remote}
    if waiting is None:
        has_waiting = Job.objects.filter(status=Status.WAITING)
        waiting = [q for q in remote if has_waiting.filter(queue=q).exists()]
    stalled = remote.intersection(waiting)
    if stalled:
        stalled -= served_queues(stalled)
    return NoWorker(
        local=not (any_alive() if alive is None else alive), remote_queues=sorted(stalled)
    )


def live_workers(leader: str, running: Counter[str] | None = None) -> list[Worker]:
    """Return the local workers seen within WORKER_DEAD_AFTER, by host and pid.

    ``leader`` is the id of the worker that leads the loop ("" when none does, or its
    lease lapsed); ``running``, when given, the attempts each worker id runs.
    """
    dead_after = timedelta(seconds=ratequeue_settings().WORKER_DEAD_AFTER)
    beats = WorkerHeartbeat.objects.filter(seen_at__gte=clock.now() - dead_after)
    return [
        Worker(
            id=beat.id,
            host=beat.host,
            pid=beat.pid,
            seen_at=beat.seen_at,
            serving=beat.serving,
            leads=beat.id == leader,
            running=None if running is None else running[beat.id],
            functions=declared(beat.functions),
            slots=beat.slots,
        )
        for beat in beats.order_by("host", "pid")
    ]


def remote_workers() -> list[RemoteWorker]:
    """Return the keys not revoked (by name), each with what its workers run now."""
    running = running_per_instance()
    return [
        RemoteWorker(
            key=key.name,
            prefix=key.prefix,
            queues=list(key.queues),
            host=key.last_host,
            last_seen=key.last_seen,
            instances={
                instance: count
                for (prefix, instance), count in sorted(running.items())
                if prefix == key.prefix
            },
        )
        for key in WorkerKey.objects.filter(revoked_at=None).order_by("name", "prefix")
    ]

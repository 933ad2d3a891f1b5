"""The loop's singleton row, the queues' runtime changes, the workers and their keys."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from django.db import models

from django_ratequeue.engine.models.statuses import LoopStatus


class LoopStateQuerySet(models.QuerySet["LoopState"]):
    """Change the loop's lease with conditional UPDATEs.

    Each wins only while the row still has the ``generation`` (and whatever else) its
    caller saw, so of several contenders one wins."""

    def take(self, generation: int, until: datetime, now: datetime, leader: str = "") -> bool:
        """Lead the loop from the generation after ``generation``, if that is still current.

        Of several contenders one wins. ``leader``: the winner's worker id."""
        return bool(
            self.filter(pk=LoopState.SINGLETON, generation=generation).update(
                generation=generation + 1,
                state=LoopStatus.RUNNING,
                lease_expires_at=until,
                updated_at=now,
                leader=leader,
            )
        )

    def ensure(self) -> LoopState:
        """Return the singleton, created if it does not exist yet."""
        state, _created = self.get_or_create(pk=LoopState.SINGLETON)
        return state

    def rest(self, state: str, wake: datetime | None) -> None:
        """Record what a step left the loop doing (inside that step's renewed lease)."""
        self.filter(pk=LoopState.SINGLETON).update(state=state, next_wake_at=wake)


class LoopState(models.Model):
    """The main loop's singleton row (pk 1); its ``generation`` admits one loop at a time."""

    SINGLETON = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON)
    generation = models.BigIntegerField(default=0)
    # The worker (WorkerHeartbeat id) whose agent leads the loop since it took ``generation``.
    leader = models.CharField(max_length=64, blank=True, default="")
    state = models.CharField(max_length=10, choices=LoopStatus.choices, default=LoopStatus.IDLE)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_wake_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    objects = LoopStateQuerySet.as_manager()

    class Meta:
        verbose_name = "loop state"

    def __str__(self) -> str:
        return f"loop {self.state} (generation {self.generation})"


class SingletonRow(models.Model):
    """A table of one row (pk 1), read by the lease's renewal through its primary key."""

    SINGLETON = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON)

    class Meta:
        abstract = True

    @classmethod
    def ensure(cls) -> Self:
        """Return the row, created if it does not exist yet."""
        row, _created = cls._default_manager.get_or_create(pk=cls.SINGLETON)
        return row


class RuntimeLimits(SingletonRow):
    """The environment's limits changed at runtime (control.py, engine/fairness/keylimits.py)."""

    # MAX_CONCURRENCY as changed at runtime; None: the setting.
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    # Counts the changes of keys' limits: a step that sees it move drops its cached ones.
    key_limits_version = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "runtime limits"
        verbose_name_plural = "runtime limits"

    def __str__(self) -> str:
        return "runtime limits"


class QueueSetting(models.Model):
    """A queue's limits changed at runtime (admin, ``ratequeue_queue``, ``pause_queue``...).

    They override ``RATEQUEUE["QUEUES"]`` until removed. Written by people, read by the
    loop at every step (the table holds one row per queue ever changed)."""

    name = models.CharField(primary_key=True, max_length=200)
    # None: as configured in settings.
    paused = models.BooleanField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    total_concurrency = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "queue setting"

    def __str__(self) -> str:
        return self.name


class WorkerHeartbeat(models.Model):
    """Proof of life of one django-q2 worker process, refreshed by its agent thread.

    It also says whether a runner serves the queue in it now (the loop asks for runners by
    this), and which job functions it knows: a job no live worker knows waits for one
    that does (docs/concepts.md, "Deploys")."""

    id = models.CharField(primary_key=True, max_length=64)
    pid = models.PositiveIntegerField()
    host = models.CharField(max_length=255)
    seen_at = models.DateTimeField()
    serving = models.BooleanField(default=False)
    # The slots of the runner that serves, as the roster counts them (0: none serves, or
    # the row was written before this column).
    slots = models.PositiveIntegerField(default=0)
    # The dotted paths of the jobs registered in the process, sorted.
    functions = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "worker heartbeat"

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


class WorkerKey(models.Model):
    """The API key of remote workers (``Authorization: Api-Key <key>``), scoped to queues.

    Only the key's SHA-256 is stored, and its ``prefix`` in clear to find it and show it:
    the key is shown once, at creation. A key is 256 random bits, so a fast hash is as
    safe as a slow one. Revoking it stops every request made with it at once."""

    name = models.CharField(max_length=200, help_text="Who or what uses it.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed = models.CharField("SHA-256", max_length=64, editable=False)
    queues = models.JSONField(default=list, help_text="The remote queues it may claim from.")
    created_at = models.DateTimeField(editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When a request last used it (written at most once per LAST_SEEN_EVERY seconds).
    last_seen = models.DateTimeField(null=True, blank=True, editable=False)
    # The host name the worker program gave with its last claim.
    last_host = models.CharField(max_length=255, blank=True, default="", editable=False)

    class Meta:
        verbose_name = "worker key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

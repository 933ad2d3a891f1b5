"""The queues' limits: one read of every source, and the one writer of runtime changes.

:class:`Queues` reads ``RATEQUEUE["QUEUES"]`` with its runtime changes on top (a
:class:`~.models.QueueSetting` row) and ``MAX_CONCURRENCY`` as in force, which limits an
unconfigured "default" queue; :func:`store_queue_changes` and
:func:`store_environment_limit` write the changes, and :func:`hold_for_later_enqueues`
makes a change hold for every job enqueued once it returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_ratequeue.conf import QueueConfig, ratequeue_settings
from django_ratequeue.engine.heads import LeaseHead, register_lease_head
from django_ratequeue.engine.models import (
    DEFAULT_QUEUE,
    LoopState,
    QueueSetting,
    RuntimeLimits,
    queue_connection,
)


@dataclass(frozen=True)
class QueueLimits:
    """The limits of one queue, as in force (None: not configured).

    ``max_concurrency`` limits each copy of the queue: one per concurrency key, and one
    for the jobs without a key; ``total_concurrency`` (None: no cap) limits all of them
    together. ``source`` says where ``max_concurrency`` comes from: "settings",
    "runtime" or "" (not configured)."""

    max_concurrency: int | None
    total_concurrency: int | None = None
    rate_limit: str | None = None
    source: str = ""

    @classmethod
    def of(
        cls,
        name: str,
        overrides: dict[str, QueueSetting] | None = None,
        environment: int | None = None,
    ) -> QueueLimits:
        """Return the limits of queue ``name``, reading what the caller did not give.

        ``overrides``: :func:`queue_overrides` read once by the caller; ``environment``:
        MAX_CONCURRENCY as in force (the limit of an unconfigured "default" queue)."""
        return Queues(environment, overrides).limits(name)

    def limit_for(self, job_max_concurrency: int | None) -> int:
        """Return the limit of a job's copy of the queue, given the job's own limit."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        return 1 if job_max_concurrency is None else job_max_concurrency


class Queues:
    """Read the limits of every queue: the settings with the runtime changes on top.

    The runtime changes are read once, at the first queue asked for (a table of a few
    rows); MAX_CONCURRENCY as in force once, when "default" needs it and it was not
    given. The loop makes one per step, the dashboard one per page."""

    def __init__(
        self,
        environment: int | None = None,
        overrides: dict[str, QueueSetting] | None = None,
    ) -> None:
        self.settings = ratequeue_settings()
        self._environment = environment
        self._overrides = overrides
        self._limits: dict[str, QueueLimits] = {}

    @property
    def environment(self) -> int:
        """``MAX_CONCURRENCY`` as in force."""
        if self._environment is None:
            self._environment = environment_limit()
        return self._environment

    @property
    def overrides(self) -> dict[str, QueueSetting]:
        """Every runtime change, by queue name."""
        if self._overrides is None:
            self._overrides = queue_overrides()
        return self._overrides

    def configured(self) -> set[str]:
        """Return the names of the queues configured in settings or changed at runtime."""
        return {DEFAULT_QUEUE, *self.settings.QUEUES, *self.overrides}

    def limits(self, name: str) -> QueueLimits:
        """Return the limits of queue ``name``."""
        if name not in self._limits:
            self._limits[name] = self.merge(name)
        return self._limits[name]

    def merge(self, name: str) -> QueueLimits:
        """Merge queue ``name``'s settings, runtime change and default."""
        configured_queue = self.settings.QUEUES.get(name)
        config = configured_queue or QueueConfig()
        override = self.overrides.get(name) or QueueSetting(name=name)
        limit = override.max_concurrency
        if limit is None and configured_queue is not None:
            limit = configured_queue.max_concurrency
        elif limit is None and name == DEFAULT_QUEUE:
            limit = self.environment
        paused = config.paused if override.paused is None else override.paused
        # Where the effective value comes from: the pause if paused, else the limit.
        changed_at_runtime = override.paused if paused else override.max_concurrency
        source = ""
        if changed_at_runtime is not None:
            source = "runtime"
        elif limit is not None or paused:
            source = "settings"
        total = override.total_concurrency
        return QueueLimits(
            max_concurrency=0 if paused else limit,
            total_concurrency=config.total_concurrency if total is None else total,
            rate_limit=config.rate_limit,
            source=source,
        )


def store_queue_changes(name: str, **changes: Any) -> QueueSetting:
    """Write ``changes`` (checked by the caller) into queue ``name``'s runtime change.

    In the caller's transaction; a row left with nothing to change is deleted. The one
    writer of :class:`QueueSetting`, for :mod:`.control` and enqueue-time limits alike."""
    setting, _created = QueueSetting.objects.select_for_update().get_or_create(name=name)
    for field, value in changes.items():
        setattr(setting, field, value)
    overrides = (setting.paused, setting.max_concurrency, setting.total_concurrency)
    if all(value is None for value in overrides):
        setting.delete()
    else:
        setting.save()
    return setting


def store_environment_limit(limit: int | None) -> None:
    """Write the runtime change of ``MAX_CONCURRENCY`` (checked by the caller; None: none)."""
    RuntimeLimits.objects.update_or_create(
        pk=RuntimeLimits.SINGLETON, defaults={"max_concurrency": limit}
    )


def hold_for_later_enqueues() -> None:
    """Make the runtime change of the current transaction hold for every later enqueue.

    Once the transaction commits, wait for the loop's step under way, if one is
    (:func:`wait_for_the_step_in_flight`): a job enqueued after the caller returns is then
    read only by steps that see the change."""
    transaction.on_commit(wait_for_the_step_in_flight, using=queue_connection().alias)


def wait_for_the_step_in_flight() -> None:
    """Return once the loop's step under way, if one is, has committed.

    On PostgreSQL a step reads the limits in its lease's renewal, its first statement,
    and the waiting jobs in later ones, which see what committed since: a step begun
    before a queue's pause could start a job enqueued after ``pause_queue`` returned.
    The step holds the loop's row from its renewal to its commit; a share lock on that
    row waits for it. A SQLite step holds the write lock from its first statement, so
    no change commits during one."""
    connection = queue_connection()
    if connection.vendor != "postgresql":
        return
    table = connection.ops.quote_name(LoopState._meta.db_table)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR SHARE", [LoopState.SINGLETON])


def environment_limit(changed: int | None = None, read: bool = True) -> int:
    """Return ``MAX_CONCURRENCY`` as in force: its runtime change, else the setting.

    ``changed`` is ``RuntimeLimits.max_concurrency`` when the caller read it already (the
    loop's steps get it from their lease's renewal); else one read by key."""
    if read:
        changed = (
            RuntimeLimits.objects.filter(pk=RuntimeLimits.SINGLETON)
            .values_list("max_concurrency", flat=True)
            .first()
        )
    return ratequeue_settings().MAX_CONCURRENCY if changed is None else changed


def queue_overrides() -> dict[str, QueueSetting]:
    """Return every runtime change, by queue name: one query on a table of a few rows."""
    return {setting.name: setting for setting in QueueSetting.objects.all()}


class KnownOverrides:
    """Keep the runtime changes the loop read, until the rows' digest says they moved.

    The digest is a lease head (``queue_settings``): the step's renewal reads it, so a
    step whose queues' changes are as last read reads no more."""

    def __init__(self) -> None:
        self.digest: str | None = None
        self.overrides: dict[str, QueueSetting] = {}

    def current(self, digest: str | None) -> dict[str, QueueSetting]:
        """Return the runtime changes as of ``digest``, read again if it moved."""
        if digest is None or digest != self.digest:
            # Read after the digest: a change committed in between is read now, and
            # the next step's digest differs from the one kept, so it is read again.
            self.overrides, self.digest = queue_overrides(), digest
        return self.overrides


def overrides_digest_sql(connection: BaseDatabaseWrapper) -> list[str]:
    """Return the SQL of a digest of every runtime change: it moves with any row's value."""
    quote = connection.ops.quote_name
    table = quote(QueueSetting._meta.db_table)
    if connection.vendor == "postgresql":
        rows = f"string_agg(t::text, ',' ORDER BY t.{quote('name')})"
        return [f"SELECT md5(coalesce({rows}, '')) FROM {table} t"]
    columns = [field.column for field in QueueSetting._meta.concrete_fields if field.column]
    row = " || ',' || ".join(f"quote(t.{quote(column)})" for column in columns)
    ordered = f"SELECT * FROM {table} ORDER BY {quote('name')}"
    return [f"SELECT coalesce(group_concat({row}, ';'), '') FROM ({ordered}) t"]


def runtime_limit_sql(connection: BaseDatabaseWrapper, column: str) -> list[str]:
    """Return the SQL that reads ``column`` of the runtime limits' row, by its key."""
    table = connection.ops.quote_name(RuntimeLimits._meta.db_table)
    return [f"SELECT {column} FROM {table} WHERE id = {RuntimeLimits.SINGLETON}"]


# The runtime changes of the queues' limits, as a digest that moves when any row does.
register_lease_head(LeaseHead("queue_settings", overrides_digest_sql))
# MAX_CONCURRENCY as changed at runtime (None: the setting).
register_lease_head(
    LeaseHead("max_concurrency", partial(runtime_limit_sql, column="max_concurrency"))
)

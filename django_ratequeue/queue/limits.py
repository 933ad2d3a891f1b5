"""The limits a queue runs under: ``RATEQUEUE["QUEUES"]`` with the runtime overrides of
:mod:`.control` on top, read afresh at every step of the loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..conf import QueueConfig, ratequeue_settings
from .models import LoopState, QueueSetting


@dataclass(frozen=True)
class QueueLimits:
    """The limits of one queue: ``RATEQUEUE["QUEUES"]`` with the runtime overrides of
    :mod:`.control` on top (None: not configured). ``max_concurrency`` limits each copy
    of the queue: one per concurrency key, and one for the jobs without a key;
    ``total_concurrency`` (None: no cap) limits all of them together. ``source`` says
    where ``max_concurrency`` comes from: "settings", "runtime" or "" (not configured)."""

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
        """``overrides``: :func:`queue_overrides` read once by the caller; read here if
        None. ``environment``: MAX_CONCURRENCY as in force, likewise (the limit of an
        unconfigured "default" queue)."""
        settings = ratequeue_settings()
        configured_queue = settings.QUEUES.get(name)
        config = configured_queue or QueueConfig()
        if overrides is None:
            overrides = {s.name: s for s in QueueSetting.objects.filter(name=name)}
        override = overrides.get(name) or QueueSetting(name=name)
        limit = override.max_concurrency
        if limit is None and configured_queue is not None:
            limit = configured_queue.max_concurrency
        elif limit is None and name == "default":
            limit = environment_limit() if environment is None else environment
        paused = override.paused
        if paused is None:
            paused = config.paused
        # Where the effective value comes from: the pause if paused, else the limit.
        changed_at_runtime = override.paused if paused else override.max_concurrency
        configured = limit is not None or paused
        return cls(
            max_concurrency=0 if paused else limit,
            total_concurrency=config.total_concurrency
            if override.total_concurrency is None
            else override.total_concurrency,
            rate_limit=config.rate_limit,
            source="runtime"
            if changed_at_runtime is not None
            else "settings"
            if configured
            else "",
        )

    def limit_for(self, job_max_concurrency: int | None) -> int:
        if self.max_concurrency is not None:
            return self.max_concurrency
        return 1 if job_max_concurrency is None else job_max_concurrency


def store_queue_changes(name: str, **changes: Any) -> QueueSetting:
    """Write ``changes`` (checked by the caller) into queue ``name``'s runtime override, in
    the caller's transaction; a row left with nothing to override is deleted. The one
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


def environment_limit(changed: int | None = None, read: bool = True) -> int:
    """``MAX_CONCURRENCY`` as in force: the runtime change (:mod:`.control`), else the
    setting. ``changed`` is ``LoopState.max_concurrency`` when the caller read it
    already (the loop's steps get it from their lease's renewal); else one read by key."""
    if read:
        changed = (
            LoopState.objects.filter(pk=LoopState.SINGLETON)
            .values_list("max_concurrency", flat=True)
            .first()
        )
    return ratequeue_settings().MAX_CONCURRENCY if changed is None else changed


def queue_overrides() -> dict[str, QueueSetting]:
    """Every runtime override, by queue name: one query on a table of a few rows."""
    return {setting.name: setting for setting in QueueSetting.objects.all()}

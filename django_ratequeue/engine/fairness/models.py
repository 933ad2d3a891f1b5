"""Per-key limits of a queue set at runtime, the record of every change to them, the turns."""

from __future__ import annotations

from django.db import models

from django_ratequeue.engine.models.cluster import SingletonRow


class KeyLimit(models.Model):
    """One concurrency key's own limits in a queue, overriding the queue's defaults.

    Written by ``set_key_limit`` and the admin (engine/fairness/keylimits.py), read by the loop
    through a per-process cache (engine/fairness/shares.py). None: not overridden (the queue's
    ``key_limits`` function, else the queue's defaults)."""

    queue = models.CharField(max_length=200)
    key = models.CharField(max_length=255, blank=True)
    # Jobs of this key running at once (0: none start); None: the default.
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    # Its share of the starts when keys are backlogged (weight 2: twice weight 1's).
    weight = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "key limit"
        constraints = [
            models.UniqueConstraint(fields=["queue", "key"], name="ratequeue_keylimit_unique")
        ]

    def __str__(self) -> str:
        return f"{self.queue} / {self.key or '(no key)'}"


class KeyLimitChange(models.Model):
    """One change of a key's limits: who made it, when, and the values before and after."""

    queue = models.CharField(max_length=200)
    key = models.CharField(max_length=255, blank=True)
    changed_at = models.DateTimeField(db_index=True)
    # The user's name in the admin, or what the caller of set_key_limit gave ("": code).
    changed_by = models.CharField(max_length=150, blank=True, default="")
    old_max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    new_max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    old_weight = models.PositiveIntegerField(null=True, blank=True)
    new_weight = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        verbose_name = "key limit change"
        indexes = [models.Index(fields=["queue", "key", "changed_at"])]

    def __str__(self) -> str:
        return f"{self.queue} / {self.key or '(no key)'} at {self.changed_at:%Y-%m-%d %H:%M:%S}"


class TurnState(SingletonRow):
    """Where the dispatch's turns over the queues and each queue's keys begin (turns.py).

    Kept in the database so that a new leader goes on where the last one stopped."""

    # Per queue, the concurrency key that got the last start: the next round begins after it.
    key_cursors = models.JSONField(default=dict, blank=True)
    # The queue that got the last start: the next step's turn over the queues begins after it.
    queue_cursor = models.CharField(max_length=200, blank=True, default="")
    # Per queue, the starts left to the key of key_cursors in its weighted turn (0: none).
    key_credits = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "turn state"

    def __str__(self) -> str:
        return "turn state"

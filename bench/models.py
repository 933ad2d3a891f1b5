from django.db import models


class NaiveCounter(models.Model):
    """A fixed-window counter as one writes it by hand: lock the row, read, add one, save.

    The reference anchor the brief cites ("naive ORM select_for_update").
    """

    key = models.CharField(max_length=255, unique=True)
    window = models.BigIntegerField(default=0)
    count = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.key}: {self.count} in window {self.window}"


class JobStart(models.Model):
    """When a latency-probe job started (``time.time()`` in the worker), by sequence number."""

    seq = models.IntegerField(unique=True)
    started = models.FloatField()

    def __str__(self) -> str:
        return f"job {self.seq} started at {self.started}"

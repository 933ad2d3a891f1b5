from django.db import models


class RateLimitState(models.Model):
    """The two numbers a rate limit keeps per (name, key, shard).

    ``value`` is the tokens available at ``ts`` (negative while tokens are reserved);
    ``ts`` is seconds since the epoch: the last update for a token bucket, the start of
    the current window for a fixed window.
    """

    name = models.CharField(max_length=200)
    key = models.CharField(max_length=255, blank=True, default="")
    shard = models.PositiveSmallIntegerField(default=0)
    value = models.FloatField()
    ts = models.FloatField()

    class Meta:
        verbose_name = "rate limit"
        constraints = [
            models.UniqueConstraint(
                fields=["name", "key", "shard"], name="ratequeue_ratelimit_unique"
            )
        ]

    def __str__(self) -> str:
        label = f"{self.name}[{self.key}]" if self.key else self.name
        return f"{label} shard {self.shard}" if self.shard else label


class RateLimitDecisionTotal(models.Model):
    """How many consumes of one limit were allowed, reserved or refused, since first counted.

    Each process tallies its decisions in memory and adds them here every few seconds
    (:mod:`.counting`), so counting costs the hot path no statement. The Prometheus
    counter ``ratequeue_rate_limit_decisions_total`` reads these rows."""

    class Result(models.TextChoices):
        ALLOWED = "allowed"
        RESERVED = "reserved"
        REFUSED = "refused"

    name = models.CharField(max_length=200)
    result = models.CharField(max_length=8, choices=Result.choices)
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "rate-limit decision total"
        constraints = [
            models.UniqueConstraint(
                fields=["name", "result"], name="ratequeue_ratelimit_decisions_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.result}: {self.count}"

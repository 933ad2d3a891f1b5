"""What the public rate-limit endpoint reads and answers: ``GET ratelimits/<name>/``."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from django_ratequeue.api.serializers import StrictSerializer
from django_ratequeue.ratelimit.config import MAX_TOKENS


class TokenCount(serializers.FloatField):
    """A number of tokens: more than 0 and at most ``MAX_TOKENS`` (the schema says so too)."""

    schema_extra = {"minimum": 0, "exclusiveMinimum": True, "maximum": MAX_TOKENS}

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if not 0 < value <= MAX_TOKENS:
            raise serializers.ValidationError(
                f"count must be more than 0 and at most {MAX_TOKENS:g}."
            )
        return value


class RateLimitQuerySerializer(StrictSerializer):
    """``GET ratelimits/<name>/?count=n``: only ``count`` (the key is never a parameter)."""

    json_types = False
    count = TokenCount(required=False, default=1, help_text="The tokens to check for.")

    def unknown(self, key: str) -> str:
        return "Unknown parameter: the only one is count (the key comes from the server)."


class RateLimitSerializer(serializers.Serializer[Any]):
    """A public rate limit as it stands for the requesting user.

    ``value`` tokens at ``ts`` (a token bucket refills ``rate`` per ``period`` seconds
    up to ``capacity``; a fixed window adds ``rate`` each ``period``), and whether
    ``count`` tokens would be admitted now (``ok``), else when (``retry_at``,
    ``retry_after`` seconds)."""

    name = serializers.CharField()
    kind = serializers.CharField()
    value = serializers.FloatField()
    capacity = serializers.FloatField()
    rate = serializers.FloatField()
    period = serializers.FloatField()
    max_reserved = serializers.FloatField(allow_null=True)
    count = serializers.FloatField()
    ok = serializers.BooleanField()
    retry_at = serializers.DateTimeField(allow_null=True)
    retry_after = serializers.FloatField(allow_null=True)
    ts = serializers.DateTimeField()

"""The admin for rate-limit rows: what each limit holds now, and a reset.

Values are read-only: a row's ``value`` only means something together with its ``ts``
and configuration, so the page shows the value projected to now and the configured limit,
and the only change it offers is the engine's reset.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.admin.display import moment
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.ratelimit.config import KeyedConfig
from django_ratequeue.ratelimit.decisions import project_row_value, reset_rate_limit
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.status import config_for, describe


@admin.register(RateLimitState)
class RateLimitStateAdmin(PermittedActionsMixin, admin.ModelAdmin):
    list_display = ["name", "key", "shard", "value_now", "limit", "updated"]
    list_filter = ["name"]
    search_fields = ["name", "key"]
    ordering = ["name", "key", "shard"]
    readonly_fields = ["updated", "value_now", "limit"]
    actions = ["reset"]

    class Media:
        css = {"all": ["ratequeue/lists.css"]}

    @admin.display(description="value now")
    def value_now(self, row: RateLimitState) -> str:
        config = config_for(row.name, key=row.key or None)
        value = None if config is None else project_row_value(row, config)
        if value is None:
            return f"{row.value:.2f} (stored, at ts)"
        return f"{value:.2f}"

    @admin.display(description="configured limit")
    def limit(self, row: RateLimitState) -> str:
        """Describe the row's limit: for a keyed one, its function and the key's config."""
        configured = ratequeue_settings().RATE_LIMITS.get(row.name)
        text = describe(configured)
        if isinstance(configured, KeyedConfig):
            own = config_for(row.name, key=row.key or None)
            text += f" → {describe(own) if own else 'no config for this key (see the log)'}"
        return text

    @admin.display(description="updated (ts)", ordering="ts")
    def updated(self, row: RateLimitState) -> SafeString | str:
        return moment(datetime.fromtimestamp(row.ts, tz=UTC))

    @admin.action(
        description="Reset the selected rate limits (all shards of each key)",
        permissions=["delete"],
    )
    def reset(self, request: HttpRequest, queryset: QuerySet[RateLimitState]) -> None:
        limits = set(queryset.values_list("name", "key"))
        for name, key in sorted(limits):
            reset_rate_limit(name, key=key or None)
        self.message_user(request, f"Reset {len(limits)} rate limit(s).", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

"""The admin for concurrency keys' own limits, and the record of who changed them.

A row overrides the queue's defaults for one key (docs/key-limits.md); every save and
delete goes through the one writer, which records the change with the user's name.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_ratequeue.admin.placement import OffTheIndexMixin
from django_ratequeue.admin.viewonly import ViewOnlyMixin
from django_ratequeue.control import check_queue_name
from django_ratequeue.jobs import (
    check_key,
    check_key_concurrency,
    check_key_weight,
    store_key_limit,
)
from django_ratequeue.models import KeyLimit, KeyLimitChange


class KeyLimitForm(forms.ModelForm):
    class Meta:
        model = KeyLimit
        fields = ["queue", "key", "max_concurrency", "weight"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("max_concurrency") is None and data.get("weight") is None:
            raise forms.ValidationError(
                "Set max_concurrency, weight or both; delete the row to go back to the defaults."
            )
        queue = data.get("queue") or self.instance.queue
        key = data.get("key", self.instance.key) or ""
        try:
            check_queue_name(queue)
            check_key(key)
            if data.get("max_concurrency") is not None:
                check_key_concurrency(queue, key, data["max_concurrency"])
            if data.get("weight") is not None:
                check_key_weight(queue, key, data["weight"])
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        return data

    def validate_unique(self) -> None:
        """Let a new row for a key that has one change it (the writer updates in place)."""


@admin.register(KeyLimit)
class KeyLimitAdmin(admin.ModelAdmin):
    form = KeyLimitForm
    list_display = ["queue", "key", "max_concurrency", "weight", "updated_at"]
    list_filter = ["queue"]
    search_fields = ["key"]
    ordering = ["queue", "key"]

    def get_readonly_fields(self, request: HttpRequest, obj: KeyLimit | None = None) -> Any:
        return ["queue", "key"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: KeyLimit, form: Any, change: bool) -> None:
        # Through the one writer: the change is recorded and the loop kicked.
        stored = store_key_limit(obj.queue, obj.key, obj.max_concurrency, obj.weight, who(request))
        if stored is not None:
            obj.pk = stored.pk

    def delete_model(self, request: HttpRequest, obj: KeyLimit) -> None:
        store_key_limit(obj.queue, obj.key, None, None, who(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KeyLimit]) -> None:
        for row in queryset:
            self.delete_model(request, row)


@admin.register(KeyLimitChange)
class KeyLimitChangeAdmin(OffTheIndexMixin, ViewOnlyMixin, admin.ModelAdmin):
    list_display = [
        "changed_at",
        "changed_by",
        "queue",
        "key",
        "old_max_concurrency",
        "new_max_concurrency",
        "old_weight",
        "new_weight",
    ]
    list_filter = ["queue"]
    search_fields = ["key", "changed_by"]
    ordering = ["-changed_at"]


def who(request: HttpRequest) -> str:
    """Return the name of the user making a change in the admin."""
    user = getattr(request, "user", None)
    return str(user.get_username()) if user is not None and user.is_authenticated else ""

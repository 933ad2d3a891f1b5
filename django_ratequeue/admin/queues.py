"""The admin for queue settings changed at runtime: pause, resume, change a limit.

A row overrides the queue's entry in ``RATEQUEUE["QUEUES"]``; the queue overview on the
jobs page shows the limit in force and where it comes from.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..queue.control import (
    change_queue,
    check_queue_concurrency,
    check_queue_name,
    check_total_concurrency,
)
from ..queue.models import QueueSetting
from .actions import PermittedActionsMixin
from .objectids import StorableIdsMixin


class QueueSettingForm(forms.ModelForm):
    class Meta:
        model = QueueSetting
        fields = ["name", "paused", "max_concurrency", "total_concurrency"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            name = check_queue_name(data.get("name") or getattr(self.instance, "name", ""))
            if data.get("max_concurrency") is not None:
                check_queue_concurrency(name, data["max_concurrency"])
            if data.get("total_concurrency") is not None:
                check_total_concurrency(name, data["total_concurrency"])
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        return data


@admin.register(QueueSetting)
class QueueSettingAdmin(StorableIdsMixin, PermittedActionsMixin, admin.ModelAdmin):
    form = QueueSettingForm
    list_display = ["name", "paused", "max_concurrency", "total_concurrency", "updated_at"]
    actions = ["pause", "resume"]

    def get_readonly_fields(self, request: HttpRequest, obj: QueueSetting | None = None) -> Any:
        return ["name"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: QueueSetting, form: Any, change: bool) -> None:
        # Through change_queue: validated again, and the loop is kicked after commit.
        change_queue(
            obj.name,
            paused=obj.paused,
            max_concurrency=obj.max_concurrency,
            total_concurrency=obj.total_concurrency,
        )

    def delete_model(self, request: HttpRequest, obj: QueueSetting) -> None:
        change_queue(obj.name, paused=None, max_concurrency=None, total_concurrency=None)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[QueueSetting]) -> None:
        for setting in queryset:
            self.delete_model(request, setting)

    @admin.action(description="Pause the selected queues", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[QueueSetting]) -> None:
        for setting in queryset:
            change_queue(setting.name, paused=True)
        messages.success(request, f"Paused {len(queryset)} queue(s).")

    @admin.action(description="Resume the selected queues", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[QueueSetting]) -> None:
        for setting in queryset:
            change_queue(setting.name, paused=False)
        messages.success(request, f"Resumed {len(queryset)} queue(s).")

"""The admin for queue settings changed at runtime: pause, resume, change a limit.

A row overrides the queue's entry in ``RATEQUEUE["QUEUES"]``. Above the rows, the list
shows every queue: its settings, its runtime change and the limits in force.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.http import urlencode

from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.admin.objectids import StorableIdsMixin
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.control import (
    change_queue,
    check_queue_concurrency,
    check_queue_name,
    check_total_concurrency,
)
from django_ratequeue.jobs import Queues
from django_ratequeue.models import QueueSetting


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

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {**(extra_context or {}), "queues": every_queue()})

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


def every_queue() -> list[dict[str, str]]:
    """Return each queue configured or changed at runtime: its settings, change, limits."""
    queues = Queues()
    configs = ratequeue_settings().QUEUES
    rows = []
    for name in sorted(queues.configured()):
        config, override = configs.get(name), queues.overrides.get(name)
        limits = queues.limits(name)
        if override is not None:
            url = reverse("admin:django_ratequeue_queuesetting_change", args=[override.pk])
        else:
            url = (
                reverse("admin:django_ratequeue_queuesetting_add")
                + "?"
                + urlencode({"name": name})
            )
        rows.append(
            {
                "name": name,
                "configured": _described(config) if config else "not configured",
                "runtime": _changed(override) if override else "",
                "in_force": "paused"
                if limits.max_concurrency == 0
                else _limits(limits.max_concurrency, limits.total_concurrency),
                "url": url,
            }
        )
    return rows


def _limits(max_concurrency: int | None, total: int | None) -> str:
    """Return a queue's limits in words."""
    text = "max_concurrency " + ("not set" if max_concurrency is None else str(max_concurrency))
    return text if total is None else f"{text}, total_concurrency {total}"


def _described(config: Any) -> str:
    """Return a queue's entry in RATEQUEUE["QUEUES"] in words."""
    parts = [_limits(config.max_concurrency, config.total_concurrency)]
    parts += [f"rate limit {config.rate_limit}"] if config.rate_limit else []
    parts += ["paused"] if config.paused else []
    parts += ["remote workers"] if config.remote else []
    return ", ".join(parts)


def _changed(setting: QueueSetting) -> str:
    """Return a runtime change in words."""
    parts = [] if setting.paused is None else ["paused" if setting.paused else "resumed"]
    if setting.max_concurrency is not None:
        parts.append(f"max_concurrency {setting.max_concurrency}")
    if setting.total_concurrency is not None:
        parts.append(f"total_concurrency {setting.total_concurrency}")
    return ", ".join(parts)

"""The admin for remote workers' API keys: create, see where and when each was used, revoke.

The list shows what each key's workers run now. A new key is shown once, on the page
that answers the form, never in a message: messages live in a cookie."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.jobs import create_key, revoke
from django_ratequeue.models import Attempt, WorkerKey


class WorkerKeyForm(forms.ModelForm):
    queues = forms.CharField(help_text="The remote queues it may claim from, comma-separated.")

    class Meta:
        model = WorkerKey
        fields = ["name", "queues"]

    def clean_queues(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["queues"].split(",") if name.strip()]


@admin.register(WorkerKey)
class WorkerKeyAdmin(PermittedActionsMixin, admin.ModelAdmin):
    form = WorkerKeyForm
    list_display = ["prefix", "name", "queues", "last_seen", "last_host", "running", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_seen", "last_host", "revoked_at"]
    actions = ["revoke_keys"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    @admin.display(description="attempts running")
    def running(self, key: WorkerKey) -> int:
        return Attempt.objects.filter(worker_key=key, ended_at=None, active=True).count()

    def save_model(self, request: HttpRequest, obj: WorkerKey, form: Any, change: bool) -> None:
        try:
            row, key = create_key(obj.name, form.cleaned_data["queues"])
        except ValueError as error:
            self.message_user(request, str(error), messages.ERROR)
            return
        obj.pk = row.pk
        obj.new_key = key  # type: ignore[attr-defined]  # for response_add, this request only

    def response_add(
        self, request: HttpRequest, obj: WorkerKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        """Show the new key on the page that answers the form (no redirect, no message)."""
        key = getattr(obj, "new_key", None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "row": WorkerKey.objects.get(pk=obj.pk),
            "key": key,
        }
        response = TemplateResponse(
            request, "admin/django_ratequeue/workerkey/created.html", context
        )
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected keys (at once)", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[WorkerKey]) -> None:
        revoked = sum(revoke(key.prefix) for key in queryset)
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)

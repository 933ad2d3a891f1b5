"""Admin actions refused, not ignored, when the user lacks their permission."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


class PermittedActionsMixin(admin.ModelAdmin):
    """Answer 403 to a posted action the user may not run.

    Django only lists the actions a user is permitted and silently drops any other one
    that is posted; a crafted POST then looks like a success. Every action here declares
    its ``permissions``, so one that is not offered to the user is refused outright.
    """

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action not in self.get_actions(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

"""Admin pages that show rows and change none."""

from __future__ import annotations

from django.http import HttpRequest


class ViewOnlyMixin:
    """Refuse adding, changing and deleting rows in the admin: they are only shown."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

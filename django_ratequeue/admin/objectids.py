"""Admin pages of a row named in their URL: an id no database can store names nothing."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import Http404, HttpRequest

from django_ratequeue.jobs import storable


class StorableIdsMixin(admin.ModelAdmin):
    """Answer 404 to an object id holding a NUL or a lone surrogate.

    Its change, history, live, cancel and retry pages alike: the database would refuse
    the lookup (PostgreSQL: a NUL; any: a lone surrogate), a 500."""

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        if not storable(object_id):
            raise Http404("There is no such row: its id holds a NUL or a lone surrogate.")
        return super().get_object(request, object_id, from_field)

"""Names that must fit the column that stores them: the length is read from the model,
so that it is written in one place, and checked alike by the system checks and at runtime."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.apps import apps


@cache
def max_length(model: str, field: str) -> int:
    """Return the ``max_length`` of ``field`` on the app's ``model``.

    Read once, lazily: the modules that call this do not import the models."""
    return apps.get_model("django_ratequeue", model)._meta.get_field(field).max_length or 0


def check_name(what: str, name: Any, model: str, field: str) -> str:
    """Return ``name`` if it is a non-empty string that ``model.field`` holds.

    Otherwise raise a ValueError that says what ``what`` must be."""
    longest = max_length(model, field)
    if not isinstance(name, str) or not name or len(name) > longest:
        raise ValueError(
            f"{what} must be a non-empty string of at most {longest} characters, not {name!r}."
        )
    return name

"""The JSON types a request body's fields take: a number is a number, never the text "5".

DRF reads form data too, so its fields take "5" for a number, 1 for true and 5 for text;
a JSON body gets no such conversions: a client that sends the wrong type learns it now,
and the schema's types are the whole truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

# A field's class, the Python types of the JSON values it takes, and their name.
JSON_TYPES: tuple[
    tuple[type[serializers.Field[Any, Any, Any, Any]], tuple[type, ...], str], ...
] = (
    (serializers.BooleanField, (bool,), "true or false"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.CharField, (str,), "a string"),
)


def type_problem(field: serializers.Field[Any, Any, Any, Any], value: Any) -> str | None:
    """Return why ``value`` is not of the JSON type ``field`` takes, or None if it is."""
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        problems = [type_problem(field.child, item) for item in value]
        return next((problem for problem in problems if problem), None)
    if not isinstance(value, str | int | float):
        return None  # null, a list or an object: the field's own check refuses it (or not)
    for kind, types, name in JSON_TYPES:
        if isinstance(field, kind):
            whole = isinstance(value, float) and value.is_integer() and int in types
            fits = isinstance(value, types) and (bool in types or not isinstance(value, bool))
            return None if fits or whole else f"Must be {name}, not {json_name(value)}."
    return None


def type_problems(
    fields: Mapping[str, serializers.Field[Any, Any, Any, Any]], data: Mapping[Any, Any]
) -> dict[str, list[str]]:
    """Return each field of ``data`` whose value is not of its JSON type, with why."""
    problems = {
        key: type_problem(field, data[key]) for key, field in fields.items() if key in data
    }
    return {key: [problem] for key, problem in problems.items() if problem}


def json_name(value: Any) -> str:
    """Return the JSON name of ``value``'s type."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"

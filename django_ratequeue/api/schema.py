"""The OpenAPI description of each view: its answers, errors included, and its constraints.

DRF's generator (``GET schema/``) asks each view's :class:`ApiSchema`. The answers are
the ones the view gives, each error with the one :data:`ERROR` body; a field's schema
states what its serializer enforces (blank text, NUL characters, unknown keys), patterns
in the ECMA-262 dialect that JSON Schema uses. docs/http-api.md ("GET schema/").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from rest_framework import serializers
from rest_framework.schemas.openapi import AutoSchema
from rest_framework.serializers import BaseSerializer

from django_ratequeue.api.serializers import StrictSerializer

# One shape for every error: a "detail" message, or the refused fields, each with its
# messages (a list of strings; an object for a nested field such as "options"; a list of
# per-item objects for "items").
ERROR = {
    "type": "object",
    "description": 'A refusal: {"detail": "..."} or {"<field>": ["..."], ...}, nested '
    'fields under their parent ("options": {"id": [...]}), bulk items at their index.',
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": {
        "anyOf": [{"type": "array", "items": {}}, {"type": "object"}, {"type": "string"}],
    },
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}
WHEN = {
    400: "A field, a query parameter or the JSON body is refused, naming it.",
    401: "Not authenticated (or an unknown or revoked worker key).",
    403: "Not allowed: not logged in, no CSRF token, or the job's permission refused it.",
    404: "There is no such job, batch, exposed function or public rate limit (or not yours).",
    409: "Conflicts with the state: an id taken, or an attempt no longer held.",
    413: 'The body is over RATEQUEUE["API_MAX_BODY_BYTES"].',
    415: "The body is not application/json.",
    429: "Throttled, rate limited, or too many streams or claims open: wait Retry-After.",
}
RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}}
# What an API user's request may be refused with; a request that sends a body adds
# BODY_ERRORS. Worker requests authenticate with their key: a 401, never a throttle.
USER_ERRORS = (401, 403, 429)
WORKER_ERRORS = (400, 401, 413, 415)
BODY_ERRORS = (400, 413, 415)
# Characters Python's str.strip() removes: a trimmed field of only these is blank.
PY_SPACE = r"\t\n\u000b\f\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029"
PY_SPACE += r"\u202f\u205f\u3000"

# A JSONField: any JSON value (null only where the field allows it, with "nullable").
# OpenAPI 3.0 cannot say what the server refuses within one (docs/http-api.md, "Errors").
UNSTORABLE = (
    " Its strings and keys hold no NUL character (PostgreSQL cannot store one), and it "
    "nests at most 128 deep."
)
ANY_JSON: dict[str, Any] = {"description": "Any JSON value." + UNSTORABLE}
ANY_JSON_BUT_NULL = {
    "description": "Any JSON value but null." + UNSTORABLE,
    # OpenAPI 3.0: an array states its items (any, here).
    "anyOf": [
        {"type": kind, **({"items": {}} if kind == "array" else {})}
        for kind in ("object", "array", "string", "number", "boolean")
    ],
}
# A path's id: any text that is one segment of a URL.
ID = {"type": "string", "pattern": "^[^/]+$"}

Body = type[BaseSerializer[Any]] | Mapping[str, Any] | None


def ecma_pattern(pattern: str) -> str:
    r"""Return a Python regex in ECMA-262's dialect: ``\A`` and ``\Z`` as ``^`` and ``$``."""
    return re.sub(r"\\[Zz]", "$", pattern.replace(r"\A", "^"))


def text_pattern(field: serializers.CharField) -> str | None:
    """Return the pattern of what a text field refuses beyond its length, or None."""
    no_nul = any(isinstance(v, ProhibitNullCharactersValidator) for v in field.validators)
    if field.allow_blank or not field.trim_whitespace:
        return "^[^\\u0000]*$" if no_nul else None
    nul = "\\u0000" if no_nul else ""
    text = f"[^{nul}]" if no_nul else "[\\s\\S]"
    return f"^{text}*[^{PY_SPACE}{nul}]{text}*$"


def merge(schema: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Add ``extra`` to ``schema``, object by object (a field's or serializer's own bounds)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(schema.get(key), dict):
            merge(schema[key], value)
        else:
            schema[key] = value


def read_by_server(field: serializers.Field[Any, Any, Any, Any]) -> bool:
    """Tell whether ``field`` is of a request's body (a strict serializer's), not an answer's."""
    parent = field.parent
    while isinstance(parent, serializers.ListField | serializers.ListSerializer):
        parent = parent.parent
    return isinstance(parent, StrictSerializer)


class ApiSchema(AutoSchema):
    """Describe one view: its operation id, request body and query, answers and errors.

    ``answers`` maps each success status to its body: a serializer class, a schema, or
    None for no body; ``errors`` are the error statuses it may answer; ``body=False`` for
    a view that reads no body; ``links`` the operations its first answer leads to (their
    parameters by name); ``path`` a path parameter's schema where it is not an id."""

    def __init__(
        self,
        operation_id: str,
        answers: Mapping[int, Body],
        *,
        errors: Iterable[int] = (),
        request: type[BaseSerializer[Any]] | None = None,
        query: type[serializers.Serializer[Any]] | None = None,
        body: bool = True,
        links: Mapping[str, Mapping[str, str]] | None = None,
        path: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(tags=["ratequeue"])
        self.operation_id = operation_id
        self.answers = answers
        self.errors = sorted(set(errors))
        self.request_serializer, self.query = request, query
        self.body = body
        self.links = links or {}
        self.path = path or {}

    def get_operation_id(self, path: str, method: str) -> str:
        return self.operation_id

    def get_operation(self, path: str, method: str) -> dict[str, Any]:
        operation: dict[str, Any] = super().get_operation(path, method)
        if not self.body:
            operation.pop("requestBody", None)
        elif "requestBody" in operation:
            serializer: Any = self.get_request_serializer(path, method)
            fields = serializer.fields.values()
            operation["requestBody"]["required"] = any(field.required for field in fields)
        if self.query is not None:
            fields = self.query().fields.values()
            operation["parameters"] += [self.query_parameter(field) for field in fields]
        return operation

    def query_parameter(self, field: serializers.Field[Any, Any, Any, Any]) -> dict[str, Any]:
        """Return the query parameter that ``field`` of the view's query serializer reads."""
        schema = self.map_field(field)
        self.map_field_validators(field, schema)
        if field.default is not serializers.empty:
            schema["default"] = field.default
        return {
            "name": field.field_name,
            "in": "query",
            "required": False,
            "description": str(field.help_text or ""),
            "schema": schema,
        }

    def get_path_parameters(self, path: str, method: str) -> list[dict[str, Any]]:
        """Return the path's parameters: text without '/', unless ``path`` says otherwise."""
        parameters: list[dict[str, Any]] = super().get_path_parameters(path, method)
        for parameter in parameters:
            parameter["schema"] = dict(self.path.get(parameter["name"], ID))
        return parameters

    def get_components(self, path: str, method: str) -> dict[str, Any]:
        components: dict[str, Any] = {"Error": ERROR} if self.errors else {}
        if self.body and method in ("POST", "PUT", "PATCH"):
            serializer = self.get_request_serializer(path, method)
            components[self.get_component_name(serializer)] = self.map_serializer(serializer)
        for answer in self.answers.values():
            if isinstance(answer, type):
                serializer = answer()
                components[self.get_component_name(serializer)] = self.map_serializer(serializer)
        return components

    def get_request_serializer(self, path: str, method: str) -> Any:
        if self.request_serializer is None:
            return super().get_request_serializer(path, method)
        return self.request_serializer()

    def get_responses(self, path: str, method: str) -> dict[str, Any]:
        responses = {
            str(code): self.answer(code, body, first=not index)
            for index, (code, body) in enumerate(self.answers.items())
        }
        for code in self.errors:
            error: dict[str, Any] = {
                "description": WHEN[code],
                "content": {"application/json": {"schema": ERROR_REF}},
            }
            if code == 429:
                error["headers"] = RETRY_AFTER
            responses[str(code)] = error
        return responses

    def answer(self, code: int, body: Body, *, first: bool) -> dict[str, Any]:
        """Return the response ``code`` with ``body``, and the links of the first answer."""
        answer: dict[str, Any] = {"description": HTTPStatus(code).phrase}
        if isinstance(body, type):
            answer["content"] = {"application/json": {"schema": self.get_reference(body())}}
        elif body is not None:
            answer["content"] = {"application/json": {"schema": dict(body)}}
        if first and self.links:
            answer["links"] = {
                name: {"operationId": name.split(".")[0], "parameters": dict(parameters)}
                for name, parameters in self.links.items()
            }
        return answer

    def map_serializer(self, serializer: Any) -> dict[str, Any]:
        """Map a serializer as DRF does; one that refuses unknown keys admits no other."""
        result: dict[str, Any] = super().map_serializer(serializer)
        if isinstance(serializer, StrictSerializer):
            result["additionalProperties"] = False
        return result

    def map_field(self, field: Any) -> dict[str, Any]:
        """Map a field as DRF does, but any JSON for a JSONField, and a list's own bounds."""
        if isinstance(field, serializers.JSONField):
            return dict(ANY_JSON if field.allow_null else ANY_JSON_BUT_NULL)
        schema: dict[str, Any] = super().map_field(field)
        if isinstance(field, serializers.ListField):
            self.map_field_validators(field.child, schema["items"])
        if isinstance(field, serializers.ListSerializer) and not field.allow_empty:
            schema["minItems"] = 1
        most = getattr(field, "max_length", None)
        if isinstance(field, serializers.ListSerializer) and most is not None:
            schema["maxItems"] = most
        return schema

    def map_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        """Map a field's validators as DRF does, in ECMA-262's dialect, and its blank text."""
        super().map_field_validators(field, schema)
        if any(isinstance(v, RegexValidator) for v in field.validators):
            schema["pattern"] = ecma_pattern(schema["pattern"])
        extra = getattr(field, "schema_extra", None) or {}
        if isinstance(field, serializers.CharField) and read_by_server(field):
            pattern = text_pattern(field)
            # A format's grammar admits no NUL (and generators meet both slowly).
            if pattern is not None and "pattern" not in schema and "format" not in extra:
                schema["pattern"] = pattern
            if not field.allow_blank and "minLength" not in schema:
                schema["minLength"] = 1
        merge(schema, extra)


class EventStreamSchema(ApiSchema):
    """The schema of a Server-Sent Events stream: text, described in words."""

    def __init__(self, operation_id: str, *, errors: Iterable[int] = ()) -> None:
        super().__init__(operation_id, {}, errors=errors, body=False)

    def get_responses(self, path: str, method: str) -> dict[str, Any]:
        responses = super().get_responses(path, method)
        return {
            "200": {
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
                "description": "Events status, progress, output and a final result or error; "
                "each with an id to resume from (Last-Event-ID).",
            },
            "204": {"description": "The stream ended with its final event already."},
            **responses,
        }

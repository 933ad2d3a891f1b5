"""JSON request bodies, read up to ``API_MAX_BODY_BYTES`` and nested no deeper than allowed.

They are read up to ``RATEQUEUE["API_MAX_BODY_BYTES"]`` and no further, and nested no
deeper than their values may be."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.jobs import MAX_JSON_DEPTH, nested_deeper

# How deep a body may nest: a value of MAX_JSON_DEPTH where it sits deepest (a claim's
# report's result), so that each value is refused by its own field's check, naming it.
MAX_BODY_DEPTH = MAX_JSON_DEPTH + 3


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class CappedJSONParser(JSONParser):
    """Parse JSON bodies as DRF does, reading at most ``API_MAX_BODY_BYTES``.

    ``nan`` and ``inf`` are refused, as DRF's strict JSON does. A bigger body is a 413.
    (The views refuse a body by its Content-Length first; this covers one sent without.)
    A body nested deeper than ``MAX_BODY_DEPTH`` is a 400, whatever its depth: no reader
    of its values (serializers, the database, answers that show them) ever meets
    Python's recursion limit."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = ratequeue_settings().API_MAX_BODY_BYTES
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise RequestTooLarge(
                f'The request body is over {limit} bytes (RATEQUEUE["API_MAX_BODY_BYTES"]).'
            )
        try:
            data = super().parse(io.BytesIO(body), media_type, parser_context)
            # Brackets, counted in C, bound the depth: only a body with many is measured.
            brackets = body.count(b"[") + body.count(b"{")
            deep = brackets > MAX_BODY_DEPTH and nested_deeper(body.decode(), MAX_BODY_DEPTH)
        except RecursionError:
            deep = True
        if deep:
            raise ParseError(
                f"JSON parse error - the body nests lists and objects more than "
                f"{MAX_BODY_DEPTH} deep."
            )
        return data

"""JSON request bodies, read up to ``RATEQUEUE["API_MAX_BODY_BYTES"]`` and no further."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.parsers import JSONParser

from ..conf import ratequeue_settings


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class CappedJSONParser(JSONParser):
    """DRF's JSON parser (``nan`` and ``inf`` refused, as DRF's strict JSON does) that
    reads at most ``API_MAX_BODY_BYTES``: a bigger body is a 413. (The views refuse a body
    by its Content-Length first; this covers one sent without.)"""

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
        return super().parse(io.BytesIO(body), media_type, parser_context)

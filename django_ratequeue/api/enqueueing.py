"""An enqueue over HTTP: the request's options, its field errors and its refusals.

The request's own options, its calls' problems as field errors, and the library's
refusals as HTTP answers."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rest_framework import status
from rest_framework.exceptions import APIException, Throttled, ValidationError
from rest_framework.settings import api_settings

from django_ratequeue import clock
from django_ratequeue.api.ids import shown_id, stored_id
from django_ratequeue.exceptions import DuplicateJobId, RateLimited
from django_ratequeue.jobs import Registered


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with an existing job."
    default_code = "conflict"


def call_problem(job: Registered, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return the field error when ``args`` and ``kwargs`` do not fit the job's parameters.

    Such a call would fail on every attempt, and enqueue refuses it; return an empty
    dict when they fit."""
    problem = job.parameters.problem(args, kwargs)
    if problem is None:
        return {}
    field = "kwargs" if "keyword" in problem else "args"
    return {field: [f"The arguments do not fit the function: {problem}."]}


def check_call(job: Registered, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise a 400 naming the field when ``args`` and ``kwargs`` do not fit the job."""
    problem = call_problem(job, args, kwargs)
    if problem:
        raise ValidationError(problem)


def check_calls(job: Registered, calls: list[tuple[list[Any], dict[str, Any]]]) -> None:
    """Raise a 400 with each item's field errors when any of ``calls`` does not fit."""
    problems = [call_problem(job, args, kwargs) for args, kwargs in calls]
    if any(problems):
        raise ValidationError({"items": [problem or {} for problem in problems]})


def client_options(data: Mapping[str, Any], owner: str | None) -> dict[str, Any]:
    """Return the options the request gave, its ``id`` scoped to its owner."""
    client = dict(data.get("options", {}))
    if "id" in client and owner is not None:
        client["id"] = stored_id(owner, client["id"])
    return client


@contextmanager
def refusals() -> Iterator[None]:
    """Turn the library's refusals into HTTP answers; nothing was written in each case.

    A rate limit (ENQUEUE_RATE_LIMIT, a queue's ``max_reserved``) is a 429 with
    Retry-After, a duplicate id a 409, anything else it refused a 400."""
    try:
        yield
    except RateLimited as refused:
        wait = None
        if refused.retry_at is not None:
            wait = max(1, math.ceil((refused.retry_at - clock.now()).total_seconds()))
        raise Throttled(wait=wait or 1, detail=f"{refused}.") from None
    except DuplicateJobId as duplicate:
        shown = str(duplicate).replace(repr(duplicate.job_id), repr(shown_id(duplicate.job_id)))
        raise Conflict({"options": {"id": [shown]}}) from None
    except ValueError as error:
        raise ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [str(error)]}) from None

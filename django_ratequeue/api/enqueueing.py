"""Enqueueing over HTTP: which exposed job a request may call, with which options (its
id scoped to its owner, the server's ``http_options`` after its own), in one transaction
with the hook's writes, and the library's refusals as HTTP answers."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from django.db import transaction
from rest_framework import status
from rest_framework.exceptions import (
    APIException,
    NotFound,
    PermissionDenied,
    Throttled,
    ValidationError,
)
from rest_framework.request import Request
from rest_framework.settings import api_settings

from .. import clock
from ..exceptions import DuplicateJobId, RateLimited, UnknownJob
from ..queue.enqueue import enqueue
from ..queue.handles import Handle
from ..queue.models import queue_db
from ..queue.registry import Registered, exposed_job
from ..ratelimit.storage import rate_limit_db
from .ids import shown_id, stored_id


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with an existing job."
    default_code = "conflict"


def exposed(request: Request, name: str) -> Registered:
    """The exposed job ``name`` if this request may enqueue it: 404 for any other name
    (nothing is imported), 403 when its ``permission`` refuses the request."""
    try:
        job = exposed_job(name)
    except UnknownJob:
        raise NotFound("There is no such function to enqueue.") from None
    assert job.exposure is not None
    if job.exposure.permission is not None and not job.exposure.permission(request):
        raise PermissionDenied("You may not enqueue this function.")
    return job


def call_problem(job: Registered, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The field error when ``args`` and ``kwargs`` do not fit the job's parameters (a
    call that would fail on every attempt, which enqueue refuses); empty when they do."""
    problem = job.parameters.problem(args, kwargs)
    if problem is None:
        return {}
    field = "kwargs" if "keyword" in problem else "args"
    return {field: [f"The arguments do not fit the function: {problem}."]}


def check_call(job: Registered, args: list[Any], kwargs: dict[str, Any]) -> None:
    problem = call_problem(job, args, kwargs)
    if problem:
        raise ValidationError(problem)


def job_options(
    request: Request,
    job: Registered,
    args: list[Any],
    kwargs: dict[str, Any],
    data: Mapping[str, Any],
    owner: str | None,
) -> dict[str, Any]:
    """The request's options (its id scoped to its owner), then the server's
    (``http_options``), then the owner."""
    assert job.exposure is not None
    decided = job.exposure.options
    server = dict(decided(request, args, kwargs)) if decided is not None else {}
    client = dict(data.get("options", {}))
    if "id" in client and owner is not None:
        client["id"] = stored_id(owner, client["id"])
    return {**client, **server, "owner": owner}


@contextmanager
def all_or_nothing(job: Registered) -> Iterator[None]:
    """One transaction (on each database of the queue and the rate limits) around the
    job's ``http_options`` and the enqueue: what the hook did, such as charging the user's
    budget, is undone when the enqueue is refused. Without a hook there is nothing to undo,
    and the enqueue stays its own transaction."""
    assert job.exposure is not None
    with ExitStack() as stack:
        if job.exposure.options is not None:
            for alias in sorted({queue_db(), rate_limit_db()}):
                stack.enter_context(transaction.atomic(using=alias))
        yield


def enqueue_each(
    job: Registered, calls: list[tuple[list[Any], dict[str, Any]]], options: list[dict[str, Any]]
) -> list[Handle[Any]]:
    """Calls whose ``http_options`` differ, enqueued one by one in one transaction; a
    custom ``id`` gives them the ids ``enqueue_many`` would (``id-0``, ``id-1``...)."""
    handles = []
    with transaction.atomic(using=queue_db()):
        for index, ((args, kwargs), each) in enumerate(zip(calls, options, strict=True)):
            if each.get("id") is not None:
                each = {**each, "id": f"{each['id']}-{index}"}
            handles.append(enqueue(job.path, args=args, kwargs=kwargs, **each))
    return handles


@contextmanager
def refusals() -> Iterator[None]:
    """The library's refusals as HTTP answers: a rate limit (ENQUEUE_RATE_LIMIT, a queue's
    ``max_reserved``) 429 with Retry-After, a duplicate id 409, anything else it refused
    400. Nothing was written in each case."""
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

"""Which jobs the HTTP API may enqueue, for whom, and with which options of the server's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request

from django_ratequeue.exceptions import UnknownJob
from django_ratequeue.jobs import CallOptions, Registered, exposed_job

# May this request enqueue the job? (``@job(permission=...)``)
Permission = Callable[[Request], bool]
# The options the server adds to one call: (request, args, kwargs) -> options.
HttpOptions = Callable[[Request, list[Any], dict[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True)
class Exposure:
    """Describe how a job may be enqueued over HTTP (``@job(expose=True, ...)``).

    For whom (``permission``, everybody the API admits when ``None``) and with which
    options the server adds (``options``, e.g. a per-user concurrency key or a cost)."""

    job: Registered
    permission: Permission | None = None
    options: HttpOptions | None = None

    def call_options(self, request: Request) -> CallOptions | None:
        """Return the server's options for each call of ``request``, or ``None``."""
        return None if self.options is None else partial(self.options, request)


def exposed(request: Request, name: str) -> Exposure:
    """Return the exposed job ``name`` if this request may enqueue it.

    Raise a 404 for any other name (nothing is imported), a 403 when its ``permission``
    refuses the request."""
    try:
        job = exposed_job(name)
    except UnknownJob:
        raise NotFound("There is no such function to enqueue.") from None
    assert job.exposed is not None
    exposure = Exposure(job, job.exposed.permission, job.exposed.http_options)
    if exposure.permission is not None and not exposure.permission(request):
        raise PermissionDenied("You may not enqueue this function.")
    return exposure

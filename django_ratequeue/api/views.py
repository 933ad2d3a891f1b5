"""The HTTP API's views (docs/http-api.md describes each, with examples).

Every view admits whom :class:`.permissions.ApiAccess` admits, is throttled by
:class:`.throttles.ApiThrottle`, reads JSON bodies up to ``API_MAX_BODY_BYTES`` and shows
a request only its owner's jobs (:func:`.permissions.request_owner`): any other job is a
404, exactly like one that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.http.response import HttpResponseBase
from rest_framework import status
from rest_framework.exceptions import (
    NotAuthenticated,
    NotFound,
    ValidationError,
)
from rest_framework.generics import GenericAPIView
from rest_framework.renderers import BaseRenderer, JSONOpenAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.schemas.openapi import SchemaGenerator
from rest_framework.views import APIView

from django_ratequeue import clock
from django_ratequeue.api.enqueueing import check_call, check_calls, client_options, refusals
from django_ratequeue.api.exposure import exposed
from django_ratequeue.api.ids import shown_id, stored_id
from django_ratequeue.api.parsers import CappedJSONParser, RequestTooLarge
from django_ratequeue.api.permissions import ApiAccess, SchemaAccess, WorkerKeyAuth, request_owner
from django_ratequeue.api.ratelimitreads import RateLimitQuerySerializer, RateLimitSerializer
from django_ratequeue.api.schema import BODY_ERRORS, USER_ERRORS, ApiSchema, EventStreamSchema
from django_ratequeue.api.serializers import (
    BulkEnqueueSerializer,
    EnqueueSerializer,
    JobDetailSerializer,
    JobQuerySerializer,
    JobSerializer,
    job_data,
    shared,
    validated,
)
from django_ratequeue.api.sse import JobWatch, Resume, astream, event_response, stream
from django_ratequeue.api.streamcaps import take_stream_seat
from django_ratequeue.api.throttles import ApiThrottle
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.decorators import KEY_SHORTHANDS
from django_ratequeue.jobs import Handle, atomically, storable, submit, submit_batch, submit_many
from django_ratequeue.models import FINAL_STATUSES, Job
from django_ratequeue.ratelimit.decisions import check_rate_limit
from django_ratequeue.ratelimit.resolve import get_rate_limit_config


class EventStreamRenderer(BaseRenderer):
    """Let a request that accepts only ``text/event-stream`` through content negotiation.

    As EventSource's does; an error before the stream starts is sent as JSON."""

    media_type = "text/event-stream"
    format = "event-stream"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return JSONRenderer().render(data)


# The operations a new job's answer leads to (OpenAPI links), by its id.
_JOB_ID = {"getJob": "job_id", "cancelJob": "job_id", "getJobEvents": "job_id"}
JOB_LINKS = {name: {key: "$response.body#/id"} for name, key in _JOB_ID.items()}


class ApiView(GenericAPIView[Any]):
    permission_classes = [ApiAccess]
    throttle_classes = [ApiThrottle]
    throttle_scope = "ratequeue_read"
    parser_classes = [CappedJSONParser]
    renderer_classes = [JSONRenderer]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Refuse a body over ``API_MAX_BODY_BYTES`` by its length, before anything reads it.

        That is before authentication's CSRF check too. A path part no database can store
        (a job or batch id with a NUL or a lone surrogate) names nothing: a 404."""
        length = request.META.get("CONTENT_LENGTH") or "0"
        limit = ratequeue_settings().API_MAX_BODY_BYTES
        if length.isdigit() and int(length) > limit:
            raise RequestTooLarge(
                f'The request body is over {limit} bytes (RATEQUEUE["API_MAX_BODY_BYTES"]).'
            )
        super().initial(request, *args, **kwargs)
        if not all(map(storable, kwargs.values())):
            raise NotFound("There is no such thing: the URL holds a NUL or a lone surrogate.")

    def valid(self, data: Any) -> Any:
        return validated(self.get_serializer_class(), data)

    def owned_job(self, job_id: str) -> Job:
        """Return the request's own job ``job_id``, else raise a 404.

        ``job_id`` is its client's id, else the server's."""
        owner = request_owner(self.request, create=False)
        job = None
        if owner is not None:
            mine = Job.objects.filter(owner=owner)
            job = (
                mine.filter(pk=stored_id(owner, job_id)).first() or mine.filter(pk=job_id).first()
            )
        if job is None:
            raise NotFound("There is no such job.")
        return job


class EnqueueingView(ApiView):
    """An enqueue, whose throttle draws in the enqueue's own transaction.

    A request refused for any reason (its input, a limit, a duplicate id) then spends
    nothing of the enqueue throttle."""

    throttle_scope = "ratequeue_enqueue"

    def check_throttles(self, request: Request) -> None:
        """Draw nothing yet: :meth:`drawing_throttle` draws, with the enqueue."""

    @contextmanager
    def drawing_throttle(self, request: Request) -> Iterator[None]:
        """Draw the throttle (or raise its 429), then enqueue in the same transactions."""
        throttles = self.get_throttles()
        draws = any(not isinstance(t, ApiThrottle) or t.draws(self) for t in throttles)
        with atomically() if draws else nullcontext():
            super().check_throttles(request)
            yield


class EnqueueView(EnqueueingView):
    """``POST jobs/``: enqueue a call of an exposed job, owned by the requesting user."""

    serializer_class = EnqueueSerializer
    schema = ApiSchema(
        "enqueueJob",
        {201: JobSerializer},
        errors=(*USER_ERRORS, *BODY_ERRORS, 404, 409),
        links=JOB_LINKS,
    )

    def post(self, request: Request) -> Response:
        data = self.valid(request.data)
        exposure = exposed(request, data["function"])
        call = (data["args"], data["kwargs"])
        check_call(exposure.job, *call)
        server_options = exposure.call_options(request)
        owner = request_owner(request, create=True)
        options = client_options(data, owner)
        with self.drawing_throttle(request), refusals():
            created = submit(exposure.job, call, options, owner=owner, call_options=server_options)
        location = f"{request.path}{quote(shown_id(created.pk), safe='')}/"
        return Response(
            job_data(created), status=status.HTTP_201_CREATED, headers={"Location": location}
        )


class BulkEnqueueView(EnqueueingView):
    """``POST jobs/bulk/``: several calls of one exposed job, enqueued all or none."""

    serializer_class = BulkEnqueueSerializer
    schema = ApiSchema(
        "enqueueJobs",
        {201: {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}},
        errors=(*USER_ERRORS, *BODY_ERRORS, 404, 409),
        links={name: {key: "$response.body#/0/id"} for name, key in _JOB_ID.items()},
    )

    def throttle_count(self, request: Request) -> int:
        """Return the jobs the request asks for: the enqueue throttle draws a token per job."""
        items = request.data.get("items") if isinstance(request.data, Mapping) else None
        limit = ratequeue_settings().API_MAX_BULK_ITEMS
        return len(items) if isinstance(items, list) and 0 < len(items) <= limit else 1

    def post(self, request: Request) -> Response:
        data = self.valid(request.data)
        exposure = exposed(request, data["function"])
        calls = [(item["args"], item["kwargs"]) for item in data["items"]]
        check_calls(exposure.job, calls)
        server_options = exposure.call_options(request)
        owner = request_owner(request, create=True)
        options = client_options(data, owner)
        headers = {}
        with self.drawing_throttle(request), refusals():
            if data["batch"]:
                created, batch = submit_batch(
                    exposure.job, calls, options, owner=owner, call_options=server_options
                )
                root = request.path.removesuffix("jobs/bulk/")
                headers["Location"] = f"{root}batches/{quote(batch.id, safe='')}/"
            else:
                created = submit_many(
                    exposure.job, calls, options, owner=owner, call_options=server_options
                )
        body = [job_data(job) for job in created]
        return Response(body, status=status.HTTP_201_CREATED, headers=headers)


class JobView(ApiView):
    """``GET jobs/<id>/?since=n``: the job as its owner sees it, with its output.

    The output after chunk ``n`` (the polling client's stream)."""

    serializer_class = JobDetailSerializer
    schema = ApiSchema(
        "getJob",
        {200: JobDetailSerializer},
        errors=(*USER_ERRORS, 400, 404),
        query=JobQuerySerializer,
    )

    def get(self, request: Request, job_id: str) -> Response:
        query = validated(JobQuerySerializer, request.query_params.dict())
        job = self.owned_job(job_id)
        context = {"since": query["since"]}
        return Response(JobDetailSerializer(job, context=context).data)


class CancelView(ApiView):
    """``POST jobs/<id>/cancel/``: ask for the job to be canceled; 202 with the job as it is now.

    It is canceled at once unless it runs, else when its attempt ends."""

    serializer_class = JobSerializer
    schema = ApiSchema("cancelJob", {202: JobSerializer}, errors=(*USER_ERRORS, 404), body=False)

    def post(self, request: Request, job_id: str) -> Response:
        job = self.owned_job(job_id)
        Handle(job.pk, owner=job.owner).cancel()
        return Response(job_data(job), status=status.HTTP_202_ACCEPTED)


class EventsView(ApiView):
    """``GET jobs/<id>/events/``: the job's Server-Sent Events (see :mod:`.sse`)."""

    renderer_classes = [JSONRenderer, EventStreamRenderer]
    schema = EventStreamSchema("getJobEvents", errors=(*USER_ERRORS, 404))

    def get(self, request: Request, job_id: str) -> HttpResponseBase:
        job = self.owned_job(job_id)
        resume = Resume.parse(request.headers.get("Last-Event-ID"), request.GET.get("since"))
        if resume.ended and job.status in FINAL_STATUSES:
            return HttpResponse(status=status.HTTP_204_NO_CONTENT)
        hold = take_stream_seat(request, job.owner)
        watch = JobWatch(job.pk, resume.cursor)
        return event_response(request, hold, stream(watch), astream(watch))


class RateLimitView(ApiView):
    """``GET ratelimits/<name>/?count=n``: a public rate limit for the requesting user."""

    serializer_class = RateLimitSerializer
    schema = ApiSchema(
        "getRateLimit",
        {200: RateLimitSerializer},
        errors=(*USER_ERRORS, 400, 404),
        query=RateLimitQuerySerializer,
    )

    def get(self, request: Request, name: str) -> Response:
        settings = ratequeue_settings()
        if name not in settings.PUBLIC_RATE_LIMITS:
            raise NotFound("There is no such public rate limit.")
        count = validated(RateLimitQuerySerializer, request.query_params.dict())["count"]
        key = limit_key(request, settings.PUBLIC_RATE_LIMITS[name])
        config = get_rate_limit_config(name, key=key)  # a keyed limit: the user's own
        try:
            result = check_rate_limit(name, key=key, count=count, config=config)
        except ValueError as error:
            raise ValidationError({"count": [str(error)]}) from None
        body = {
            "name": name,
            "kind": config.kind,
            "value": result.value,
            "capacity": config.max_tokens,
            "rate": config.rate,
            "period": config.period_seconds,
            "max_reserved": config.max_reserved,
            "count": count,
            "ok": result.ok,
            "retry_at": result.retry_at,
            "retry_after": result.retry_after,
            "ts": clock.now(),
        }
        return Response(shared(RateLimitSerializer).to_representation(body))


class SchemaView(APIView):
    """``GET schema/``: the OpenAPI schema of these endpoints, by DRF's own generator.

    Their paths are under wherever the project mounted them; for whoever may use them
    (:class:`.permissions.SchemaAccess`)."""

    permission_classes = [SchemaAccess]
    renderer_classes = [JSONOpenAPIRenderer]
    patterns: list[Any] = []

    def get_authenticators(self) -> list[Any]:
        """Return the project's authentication, then a remote worker's key."""
        return [*super().get_authenticators(), WorkerKeyAuth()]

    def get(self, request: Request) -> Response:
        generator = SchemaGenerator(
            title="django-ratequeue",
            description="Enqueue exposed jobs, follow them live, read public rate limits.",
            version="1",
            patterns=self.patterns,
            url=request.path.removesuffix("schema/"),
        )
        return Response(generator.get_schema(request=None, public=True))


# --- public rate limits -----------------------------------------------------------------


def limit_key(request: Request, rule: Any) -> str | None:
    """Return the key of the requesting user under a public limit's rule (never from the query)."""
    if rule is None:
        return None
    key_func = KEY_SHORTHANDS[rule] if isinstance(rule, str) else rule
    try:
        key = key_func(request)
    except ImproperlyConfigured:  # "user" for a visitor who is not logged in
        raise NotAuthenticated("Log in to see this rate limit.") from None
    if key is None:
        raise NotFound("This rate limit does not apply to this request.")
    return str(key)

"""What the HTTP API reads and writes: requests checked field by field, jobs, rate limits.

An error names its field, and nothing is written. The rules are the library's own
(:mod:`..queue.options`, :mod:`..queue.bounds`), so a request is refused exactly when
the same call of ``enqueue`` would be; docs/http-api.md tells which options a request
may give (``CLIENT_OPTIONS``) and which are the server's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, get_args

from rest_framework import serializers

from django_ratequeue.api.ids import CLIENT_ID_MAX_LENGTH, shown_id
from django_ratequeue.api.jsontypes import type_problems
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.exceptions import JobCanceled
from django_ratequeue.jobs import (
    MAX_DELAY,
    NUL_REFUSED,
    OPTION_NAMES,
    Basis,
    Eta,
    Status,
    check_json,
    parse_start_at,
    seconds,
)
from django_ratequeue.models import Job, OutputChunk
from django_ratequeue.plugins.eta.estimates import job_eta, owner_view

S = TypeVar("S", bound=serializers.BaseSerializer[Any])

CLIENT_OPTIONS = ("start_at", "run_after", "id", "on_duplicate_id")
# Ids whose URL jobs/<id>/ is another URL: the bulk enqueue's, or the jobs/ list's once a
# browser has resolved the dot segment.
UNADDRESSABLE_IDS = frozenset({"bulk", ".", ".."})
# Output chunks in one answer of ``GET jobs/<id>/`` at most (as many as one look of an
# event stream reads): a client far behind catches up over a few polls.
OUTPUT_PER_RESPONSE = 200


def library_rule(check: Any, *args: Any) -> Any:
    """Apply one of the library's checks, its ValueError becoming the field's error."""
    try:
        return check(*args)
    except ValueError as error:
        raise serializers.ValidationError(str(error)) from None


def shared(serializer_class: type[S]) -> S:
    """Return the process's one instance of ``serializer_class``, its fields built once.

    DRF builds them anew for each instance (a deep copy of every declared field), which
    cost an enqueue more than its query did. Checking data (``run_validation``) and
    shaping an object (``to_representation``) keep nothing on the instance: threads
    share it. Only for serializers that use no ``context``."""
    serializer = _shared.get(serializer_class)
    if serializer is None:
        serializer = serializer_class()
        if isinstance(serializer, serializers.Serializer):
            serializer.fields  # noqa: B018 (built before it is shared)
        _shared[serializer_class] = serializer  # two threads may both build one: harmless
    return serializer


_shared: dict[type[Any], Any] = {}


def validated(serializer_class: type[serializers.BaseSerializer[Any]], data: Any) -> Any:
    """Return ``data`` checked by the process's one instance of ``serializer_class``.

    Data it refuses is checked again by a serializer of its own, for DRF's errors
    exactly as ``is_valid`` gives them (the rare path pays for the instance)."""
    try:
        return shared(serializer_class).run_validation(data)
    except serializers.ValidationError:
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data


def job_data(job: Job) -> dict[str, Any]:
    """Return the job's answer (:class:`JobSerializer`), by the process's one instance of it."""
    data: dict[str, Any] = shared(JobSerializer).to_representation(job)
    return data


class StrictSerializer(serializers.Serializer[Any]):
    """Refuse the keys it does not know, naming each (DRF would drop them silently).

    And values not of their field's JSON type (:mod:`.jsontypes`), unless ``json_types``
    is off (a query's values are all text)."""

    json_types = True

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(map(str, set(data) - set(self.fields)))
            if unknown:
                raise serializers.ValidationError({key: [self.unknown(key)] for key in unknown})
            problems = type_problems(self.fields, data) if self.json_types else {}
            if problems:
                raise serializers.ValidationError(problems)
        return super().to_internal_value(data)

    def unknown(self, key: str) -> str:
        return f"Unknown field; the fields are: {', '.join(self.fields)}."


class StartAt(serializers.CharField):
    """When the job may start: an ISO-8601 date and time at most ``MAX_DELAY`` ahead."""

    schema_extra = {
        "format": "date-time",
        "description": f"At most {MAX_DELAY.days} days ahead (ISO 8601, RFC 3339 included).",
    }

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return library_rule(parse_start_at, super().run_validation(data))


class RunAfter(serializers.FloatField):
    """In how many seconds the job may start: from 0 to ``MAX_DELAY``."""

    schema_extra = {"minimum": 0, "maximum": MAX_DELAY.total_seconds()}

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        return float(library_rule(seconds, "run_after", value, MAX_DELAY))


class OptionsSerializer(StrictSerializer):
    """The options a request may give its job."""

    @property
    def schema_extra(self) -> dict[str, Any]:
        """Return what the schema adds: start_at or run_after, not both."""
        return {"not": {"required": ["start_at", "run_after"]}}

    start_at = StartAt(required=False, max_length=64, trim_whitespace=False)
    run_after = RunAfter(required=False)
    id = serializers.CharField(
        required=False, max_length=CLIENT_ID_MAX_LENGTH, trim_whitespace=False
    )
    on_duplicate_id = serializers.ChoiceField(["error", "ignore"], required=False)

    def unknown(self, key: str) -> str:
        if key in OPTION_NAMES:
            return "Decided by the server for this job: a request cannot set it."
        return f"Unknown option; a request may give: {', '.join(CLIENT_OPTIONS)}."

    def validate_id(self, value: str) -> str:
        if "\x00" in value:
            raise serializers.ValidationError(f"id {NUL_REFUSED}.")
        if value in UNADDRESSABLE_IDS or "/" in value:
            raise serializers.ValidationError(
                f"{value!r} cannot be the id of a job enqueued over HTTP: its URL, jobs/<id>/, "
                "would be another one's (no '/', and not 'bulk', '.' or '..')."
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "start_at" in attrs and "run_after" in attrs:
            raise serializers.ValidationError({"run_after": ["Give start_at or run_after."]})
        return attrs


class CallSerializer(StrictSerializer):
    """One call of the job's function: its positional and keyword arguments.

    Together they are JSON within ``MAX_ARGUMENTS_BYTES``."""

    args = serializers.ListField(required=False, default=list)
    kwargs = serializers.DictField(required=False, default=dict)

    def validate_args(self, value: list[Any]) -> list[Any]:
        library_rule(check_json, "arguments", value)
        return value

    def validate_kwargs(self, value: dict[str, Any]) -> dict[str, Any]:
        library_rule(check_json, "keyword arguments", value)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        sizes = {name: len(check_json(name, attrs[name])) for name in ("args", "kwargs")}
        limit = ratequeue_settings().MAX_ARGUMENTS_BYTES
        if sum(sizes.values()) > limit:
            larger = max(sizes, key=lambda name: sizes[name])
            raise serializers.ValidationError(
                {
                    larger: [
                        f"The arguments are {sum(sizes.values())} bytes of JSON; the most is "
                        f"{limit}. Pass a reference instead, such as the id of a row."
                    ]
                }
            )
        return attrs


class EnqueueSerializer(CallSerializer):
    """``POST jobs/``: a call of an exposed job."""

    function = serializers.CharField(max_length=300, trim_whitespace=False)
    options = OptionsSerializer(required=False)


def bulk_id_max_length() -> int:
    """Return the longest id of a bulk enqueue: room for its jobs' ``-<n>`` at the most items."""
    return CLIENT_ID_MAX_LENGTH - len(f"-{ratequeue_settings().API_MAX_BULK_ITEMS - 1}")


class BulkOptionsSerializer(OptionsSerializer):
    """A bulk enqueue's options: its ``id`` is its jobs' ids' prefix (``<id>-<n>``)."""

    @property
    def schema_extra(self) -> dict[str, Any]:
        bounds = {"properties": {"id": {"maxLength": bulk_id_max_length()}}}
        return {**super().schema_extra, **bounds}


class BulkEnqueueSerializer(StrictSerializer):
    """``POST jobs/bulk/``: several calls of one exposed job, enqueued all or none."""

    function = serializers.CharField(max_length=300, trim_whitespace=False)
    items = CallSerializer(many=True, allow_empty=False)
    options = BulkOptionsSerializer(required=False)
    # The jobs make a new batch (docs/batches.md), whose id each job's answer gives.
    batch = serializers.BooleanField(required=False, default=False)

    def to_internal_value(self, data: Any) -> Any:
        """Check the count first: a list over the cap is refused before its items."""
        items = data.get("items") if isinstance(data, Mapping) else None
        limit = ratequeue_settings().API_MAX_BULK_ITEMS
        if isinstance(items, list) and len(items) > limit:
            raise serializers.ValidationError(
                {
                    "items": [
                        f"{len(items)} items; one request enqueues at most {limit} "
                        '(RATEQUEUE["API_MAX_BULK_ITEMS"]).'
                    ]
                }
            )
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Check that the id leaves room for the most items' ids (``<id>-<n>``)."""
        prefix = attrs.get("options", {}).get("id")
        most = bulk_id_max_length()
        if prefix is not None and len(prefix) > most:
            last = ratequeue_settings().API_MAX_BULK_ITEMS - 1
            raise serializers.ValidationError(
                {
                    "options": {
                        "id": [
                            f"Too long for a bulk enqueue: at most {most} characters, so that "
                            f"its jobs' ids, up to '<id>-{last}', are at most "
                            f"{CLIENT_ID_MAX_LENGTH}."
                        ]
                    }
                }
            )
        return attrs


class JobSerializer(serializers.Serializer[Job]):
    """A job as its owner sees it.

    ``result`` is set once it is complete, ``error`` once it failed (the last attempt's
    message) or was canceled; each is ``null`` otherwise."""

    id = serializers.CharField(read_only=True)
    function = serializers.CharField(source="func", read_only=True)
    status = serializers.ChoiceField(Status.choices, read_only=True)
    attempts = serializers.IntegerField(read_only=True)
    progress = serializers.JSONField(read_only=True, allow_null=True)
    result = serializers.JSONField(read_only=True, allow_null=True)
    error = serializers.CharField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)
    start_at = serializers.DateTimeField(read_only=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    batch = serializers.CharField(source="batch_id", read_only=True, allow_null=True)

    def to_representation(self, instance: Job) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        data["id"] = shown_id(instance.id)
        data["batch"] = instance.batch_id or None
        data["result"] = instance.result if instance.status == Status.COMPLETE else None
        data["error"] = job_error(instance)
        return data


class OutputChunkSerializer(serializers.Serializer[Any]):
    """One chunk of a job's output, numbered from 1 across its attempts."""

    index = serializers.IntegerField(read_only=True)
    text = serializers.CharField(read_only=True)


class EtaSerializer(serializers.Serializer[Eta]):
    """When a job will start (:class:`~.plugins.eta.estimates.Eta`, docs/eta.md)."""

    # null: not shown to the job's owner (plugins/eta/estimates.py owner_view; docs/eta.md).
    position = serializers.IntegerField(read_only=True, allow_null=True)
    position_capped = serializers.BooleanField(read_only=True, allow_null=True)
    earliest_start = serializers.DateTimeField(read_only=True, allow_null=True)
    estimated_start = serializers.DateTimeField(read_only=True, allow_null=True)
    basis = serializers.ChoiceField(get_args(Basis), read_only=True)
    note = serializers.CharField(read_only=True)


def eta_data(eta: Eta) -> dict[str, Any]:
    """Return ``eta`` as the API shows it."""
    data: dict[str, Any] = shared(EtaSerializer).to_representation(eta)
    return data


class JobDetailSerializer(JobSerializer):
    """``GET jobs/<id>/?since=n``: the job, with the chunks of its output after chunk ``n``.

    At most ``OUTPUT_PER_RESPONSE`` of them, ``more_output`` when there are more: what a
    client that cannot stream reads its output from. ``eta``: when it will start."""

    output = OutputChunkSerializer(many=True, read_only=True)
    more_output = serializers.BooleanField(read_only=True)
    eta = EtaSerializer(read_only=True)

    def to_representation(self, instance: Job) -> dict[str, Any]:
        """Return the job, then its chunks after ``context["since"]``.

        The job is read first: once a final status is read, all its output is stored."""
        data = super().to_representation(instance)  # without output: the Job has none
        chunks = OutputChunk.objects.filter(job_id=instance.pk, index__gt=self.context["since"])
        rows = list(chunks.order_by("index").values("index", "text")[: OUTPUT_PER_RESPONSE + 1])
        data["output"] = rows[:OUTPUT_PER_RESPONSE]
        data["more_output"] = len(rows) > OUTPUT_PER_RESPONSE
        data["eta"] = eta_data(owner_view(job_eta(instance), instance))
        return data


class JobQuerySerializer(serializers.Serializer[Any]):
    """``GET jobs/<id>/?since=n``: the number of the last output chunk the client has."""

    since = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        max_value=2**31 - 1,
        help_text="The number of the last output chunk you have.",
    )


def job_error(job: Job) -> str | None:
    if job.status == Status.FAILED:
        return job.error
    if job.status == Status.CANCELED:
        return str(JobCanceled(job.id))
    return None

"""What the remote workers' endpoints answer: claimed attempts, a lease, a report taken in.

The claim's answer shapes its attempts with :class:`ClaimedAttemptSerializer`; the others
describe the answers in each endpoint's schema (docs/remote-workers.md tells each).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from django_ratequeue.api.schema import WORKER_ERRORS, ApiSchema

# An attempt's id in its URL: digits (an id past MAX_ID names no attempt held: a 409).
ATTEMPT_ID = {"attempt_id": {"type": "integer", "minimum": 0}}
# The operations on a claimed attempt (the claim's answer links to them).
ATTEMPT_OPS = (
    "heartbeatAttempt",
    "reportAttemptProgress",
    "appendAttemptOutput",
    "completeAttempt",
    "failAttempt",
    "releaseAttempt",
)


class NextOutputIndex(serializers.IntegerField):
    """The number the attempt's next chunk of output takes."""

    def to_representation(self, value: Any) -> int:
        return int(value.last_output or 0) + 1


class ClaimedAttemptSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    job_id = serializers.CharField()
    function = serializers.CharField(source="job.func")
    args = serializers.JSONField(source="job.args")
    kwargs = serializers.JSONField(source="job.kwargs")
    # The W3C trace context the job was enqueued in ("" without one): docs/tracing.md.
    traceparent = serializers.CharField(source="job.traceparent")
    queue = serializers.CharField()
    number = serializers.IntegerField()
    timeout = serializers.FloatField(allow_null=True)
    lease_expires_at = serializers.DateTimeField()
    output_index = NextOutputIndex(source="*")


class ReportAnswerSerializer(serializers.Serializer[Any]):
    """A report's answer within a claim's: 200 (``detail``: the error a completion was
    failed with instead, else "") or 409 (the attempt is not held)."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField([200, 409])
    detail = serializers.CharField(allow_blank=True)


class ClaimAnswerSerializer(serializers.Serializer[Any]):
    """``POST workers/claim/``: the attempts claimed, the lease, and the reports' answers.

    ``reports`` is there when the claim sent any."""

    attempts = ClaimedAttemptSerializer(many=True)
    lease_seconds = serializers.FloatField()
    reports = ReportAnswerSerializer(many=True, required=False)


class HeartbeatAnswerSerializer(serializers.Serializer[Any]):
    """A heartbeat's answer: the lease's new end, and whether the job was canceled."""

    lease_expires_at = serializers.DateTimeField()
    canceled = serializers.BooleanField()


class ReportTakenSerializer(serializers.Serializer[Any]):
    """A report's answer: ``detail`` is the error a completion was failed with instead."""

    ok = serializers.BooleanField()
    detail = serializers.CharField(allow_blank=True)


CLAIM_SCHEMA = ApiSchema(
    "claimAttempts",
    {200: ClaimAnswerSerializer},
    errors=(*WORKER_ERRORS, 403, 429),
    links={name: {"attempt_id": "$response.body#/attempts/0/id"} for name in ATTEMPT_OPS},
)
HEARTBEAT_SCHEMA = ApiSchema(
    "heartbeatAttempt",
    {200: HeartbeatAnswerSerializer},
    errors=(*WORKER_ERRORS, 404, 409),
    path=ATTEMPT_ID,
)


def report_schema(operation_id: str) -> ApiSchema:
    """Return the schema of a report on an attempt: ``{"ok", "detail"}``, or a 409."""
    return ApiSchema(
        operation_id,
        {200: ReportTakenSerializer},
        errors=(*WORKER_ERRORS, 404, 409),
        path=ATTEMPT_ID,
    )

"""The remote workers' endpoints: claim, heartbeat, progress, output, complete, fail, release.

A request authenticates with its key (:class:`.permissions.WorkerKeyAuth`), checked on
every request; bodies are checked field by field. docs/remote-workers.md tells each
endpoint and its answers (401 for a revoked key, 409 for an attempt not held).
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from django.db import connections
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, Throttled
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from django_ratequeue import clock
from django_ratequeue.api.permissions import WorkerKeyAuth
from django_ratequeue.api.serializers import StrictSerializer
from django_ratequeue.api.views import ApiView
from django_ratequeue.api.workeranswers import (
    CLAIM_SCHEMA,
    HEARTBEAT_SCHEMA,
    ClaimedAttemptSerializer,
    report_schema,
)
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine import protocol
from django_ratequeue.engine.bell import bell
from django_ratequeue.engine.workerkeys import MAX_CLAIM_WAIT, renew_after_outage, seen
from django_ratequeue.exceptions import LeaseLost
from django_ratequeue.models import WorkerKey, queue_db
from django_ratequeue.seats import free_seat, take_seat
from django_ratequeue.worker import AWAY_HEADER, BACKOFF_MAX

# The longest a claim may wait for work, and the most attempts it may take.
MAX_WAIT = MAX_CLAIM_WAIT
MAX_CLAIM = 100
# Attempt ids are bigint primary keys: a larger number names no attempt.
MAX_ID = 2**63 - 1


class LeaseLostConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = (
        "This attempt is not held by your worker: its lease lapsed, or it was ended or "
        "released. Stop working on it."
    )
    default_code = "lease_lost"


class HasWorkerKey(BasePermission):
    message = "Send a worker key: Authorization: Api-Key <key>."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, WorkerKey)


class WorkerView(ApiView):
    authentication_classes = [WorkerKeyAuth]
    permission_classes = [HasWorkerKey]
    throttle_classes = []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Renew the leases that lapsed while the worker could not reach the server.

        It says so with its ``Ratequeue-Away`` header, in seconds (:data:`AWAY_HEADER`)."""
        super().initial(request, *args, **kwargs)
        away = request.headers.get(AWAY_HEADER, "")
        try:
            seconds = float(away) if away else 0.0
        except ValueError:
            seconds = 0.0
        if math.isfinite(seconds) and seconds > 0:
            renew_after_outage(self.key, seconds, BACKOFF_MAX)

    @property
    def key(self) -> WorkerKey:
        assert isinstance(self.request.auth, WorkerKey)
        return self.request.auth

    @property
    def claimant(self) -> protocol.Claimant:
        """Any worker of the request's key (a report may come from any of its instances)."""
        return protocol.Claimant.remote(self.key, "")

    def attempt(self, attempt_id: str) -> int:
        """Return the attempt's number from its URL: a 404 unless digits, a 409 past MAX_ID."""
        if not (attempt_id.isascii() and attempt_id.isdigit()):
            raise NotFound("There is no such attempt: its id is a number.")
        if int(attempt_id) > MAX_ID:
            raise LeaseLostConflict
        seen(self.key)
        return int(attempt_id)


class KeptText(serializers.CharField):
    """Keep text whatever it holds, such as an attempt's error.

    A NUL or a lone surrogate, which DRF's CharField refuses, is escaped or replaced as
    it is stored (:func:`..queue.bounds.clip`), so that the real error is never
    dropped."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)
        self.validators = [
            validator
            for validator in self.validators
            if not isinstance(
                validator, ProhibitNullCharactersValidator | ProhibitSurrogateCharactersValidator
            )
        ]


class ReportSerializer(StrictSerializer):
    """One attempt's outcome, sent with a claim: ``complete`` or ``fail``.

    ``complete`` with its ``result``, ``fail`` with its ``error``, ``traceback``,
    ``retryable``, as their own endpoints take them."""

    id = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    action = serializers.ChoiceField(["complete", "fail"])
    result = serializers.JSONField(required=False, allow_null=True, default=None)
    error = KeptText(required=False)
    traceback = KeptText(required=False, allow_blank=True)
    retryable = serializers.BooleanField(default=True)
    timed_out = serializers.BooleanField(default=False)

    # A failure needs its error (JSON Schema's way to say so: complete, or an error).
    schema_extra = {
        "anyOf": [{"properties": {"action": {"enum": ["complete"]}}}, {"required": ["error"]}]
    }

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if data["action"] == "fail" and "error" not in data:
            raise serializers.ValidationError({"error": ["A failure needs its error."]})
        return data


class ClaimSerializer(StrictSerializer):
    worker = serializers.RegexField(
        protocol.INSTANCE.pattern, help_text="The worker process's name for itself (random)."
    )
    host = serializers.CharField(max_length=255, required=False, default="", allow_blank=True)
    queues = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=100, required=False
    )
    functions = serializers.ListField(
        child=serializers.CharField(max_length=300), max_length=1000, required=False, default=list
    )
    max = serializers.IntegerField(min_value=0, max_value=MAX_CLAIM, default=1)
    wait = serializers.FloatField(min_value=0, max_value=MAX_WAIT, default=0)
    running = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        max_length=1000,
        required=False,
        default=list,
    )
    reports = serializers.ListField(
        child=ReportSerializer(), max_length=MAX_CLAIM, required=False, default=list
    )


class ClaimView(WorkerView):
    """``POST workers/claim/``: claim up to ``max`` attempts of the key's remote queues.

    It waits up to ``wait`` seconds for one; first, it takes the outcomes in ``reports``
    (each answered as its own endpoint would: 200 or 409), so that one request ends
    attempts and takes the next ones."""

    serializer_class = ClaimSerializer
    schema = CLAIM_SCHEMA

    def post(self, request: Request) -> Response:
        data = self.valid(request.data)
        key = self.key
        queues = data.get("queues") or key.queues
        outside = sorted(set(queues) - set(key.queues))
        if outside:
            raise PermissionDenied(f"This key may not claim from: {', '.join(outside)}.")
        seen(key, data["host"])
        # Refused before the reports are taken in: the worker sends them again.
        seat = self.waiting_seat(data["wait"]) if data["wait"] > 0 else None
        try:
            reports = self.end(data["reports"]) if data["reports"] else []
            claimed = self.claim(key, data, queues)
        finally:
            if seat is not None:
                free_seat(seat)
        answer = {
            "attempts": ClaimedAttemptSerializer(claimed.attempts, many=True).data,
            "lease_seconds": ratequeue_settings().REMOTE_LEASE,
        }
        if data["reports"]:
            answer["reports"] = reports
        return Response(answer)

    def waiting_seat(self, wait: float) -> int:
        """Take a seat of the key's waiting claims (:mod:`..queue.seats`), else raise a 429."""
        limit = ratequeue_settings().API_MAX_WAITING_CLAIMS_PER_KEY
        seat = take_seat(f"claim:{self.key.prefix}", limit, wait)
        if seat is None:
            raise Throttled(
                wait=1,
                detail=f"This key has {limit} claims waiting for work already "
                '(RATEQUEUE["API_MAX_WAITING_CLAIMS_PER_KEY"]): run fewer workers on it, or '
                "give each its own key.",
            )
        return seat

    def claim(self, key: WorkerKey, data: dict[str, Any], queues: list[str]) -> Any:
        """Claim attempts, waiting up to ``data["wait"]`` seconds for one."""
        deadline = time.monotonic() + data["wait"]
        while True:
            rings = bell.ring_count()
            claimant = protocol.Claimant.remote(key, data["worker"])
            claimed = protocol.claim_remote(
                claimant, queues, data["functions"], data["max"], data["running"]
            )
            bell.pass_on()  # the next waiting claim looks after this one
            left = deadline - time.monotonic()
            if claimed.attempts or left <= 0:
                return claimed
            connection = connections[queue_db()]
            if not connection.in_atomic_block:
                connection.close()  # a waiting claim holds no database connection
            if claimed.retry_at is not None:  # a retry left to others becomes ours then
                left = min(left, max((claimed.retry_at - clock.now()).total_seconds(), 0.01))
            bell.wait(rings, left)

    def end(self, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """End the reported attempts and return each one's answer: ``{"id", "status", "detail"}``.

        The detail of a 200 is the error a completion was failed with instead ("" if
        none)."""
        ended = [protocol.Ended(report["id"], outcome_of(report)) for report in reports]
        actions = {report["id"]: report["action"] for report in reports}
        answers = {}
        for attempt_id, stored in protocol.report(self.claimant, ended).items():
            answers[attempt_id] = (
                {"id": attempt_id, "status": 409, "detail": LeaseLostConflict.default_detail}
                if stored is None
                else {
                    "id": attempt_id,
                    "status": 200,
                    "detail": stored.error if actions[attempt_id] == "complete" else "",
                }
            )
        return [answers[report["id"]] for report in reports]


def outcome_of(report: dict[str, Any]) -> protocol.Report:
    """Return the outcome a report's body tells (``complete`` or ``fail``)."""
    if report["action"] == "complete":
        return protocol.Report.returned(report["result"])
    return protocol.Report.failed(
        report["error"], report.get("traceback", ""), report["retryable"], report["timed_out"]
    )


class EmptySerializer(StrictSerializer):
    pass


class HeartbeatView(WorkerView):
    """``POST workers/attempts/<id>/heartbeat/``: extend the lease; says if canceled."""

    serializer_class = EmptySerializer
    schema = HEARTBEAT_SCHEMA

    def post(self, request: Request, attempt_id: str) -> Response:
        self.valid(request.data)  # no body: DRF's empty dict
        try:
            until, canceled = protocol.heartbeat(self.claimant, self.attempt(attempt_id))
        except LeaseLost:
            raise LeaseLostConflict from None
        return Response({"lease_expires_at": until, "canceled": canceled})


class ProgressSerializer(StrictSerializer):
    # What a job reports: an object, as report_progress takes.
    progress = serializers.DictField()


class OutputSerializer(StrictSerializer):
    index = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    text = serializers.CharField(trim_whitespace=False)


class CompleteSerializer(StrictSerializer):
    result = serializers.JSONField(required=False, allow_null=True, default=None)


class FailSerializer(StrictSerializer):
    error = KeptText()
    traceback = KeptText(required=False, allow_blank=True)
    retryable = serializers.BooleanField(default=True)
    timed_out = serializers.BooleanField(default=False)


class ReportView(WorkerView):
    """A report on an attempt: ``field`` names the body's field a ValueError is about."""

    field = ""

    def post(self, request: Request, attempt_id: str) -> Response:
        data = self.valid(request.data)  # no body: DRF's empty dict
        try:
            detail = self.report(self.attempt(attempt_id), data)
        except LeaseLost:
            raise LeaseLostConflict from None
        except (TypeError, ValueError) as error:
            raise serializers.ValidationError({self.field: [str(error)]}) from None
        return Response({"ok": True, "detail": detail or ""})

    def report(self, attempt_id: int, data: Any) -> str | None:
        """Take the report in; return what the answer's ``detail`` says (None: nothing)."""
        raise NotImplementedError

    def end_with(self, attempt_id: int, report: protocol.Report) -> str:
        """End the attempt with ``report``; return the error it was ended with."""
        stored = protocol.report(self.claimant, [protocol.Ended(attempt_id, report)])[attempt_id]
        if stored is None:
            raise LeaseLost
        return stored.error


class ProgressView(ReportView):
    """``POST workers/attempts/<id>/progress/`` ``{"progress": {...}}``."""

    serializer_class = ProgressSerializer
    schema = report_schema("reportAttemptProgress")
    field = "progress"

    def report(self, attempt_id: int, data: Any) -> None:
        protocol.report_progress(self.claimant, attempt_id, data["progress"])


class OutputView(ReportView):
    """``POST workers/attempts/<id>/output/`` ``{"index": n, "text": "..."}``."""

    serializer_class = OutputSerializer
    schema = report_schema("appendAttemptOutput")
    field = "text"

    def report(self, attempt_id: int, data: Any) -> None:
        protocol.append_output(self.claimant, attempt_id, data["index"], data["text"])


class CompleteView(ReportView):
    """``POST workers/attempts/<id>/complete/`` ``{"result": ...}``."""

    serializer_class = CompleteSerializer
    schema = report_schema("completeAttempt")
    field = "result"

    def report(self, attempt_id: int, data: Any) -> str:
        """Complete the attempt; return the error it was failed with instead, if any.

        That is when its result is not one a job may return (the answer's
        ``detail``)."""
        return self.end_with(attempt_id, protocol.Report.returned(data["result"]))


class FailView(ReportView):
    """``POST workers/attempts/<id>/fail/``: fail the attempt.

    The body is ``{"error", "traceback", "retryable", "timed_out"}``."""

    serializer_class = FailSerializer
    schema = report_schema("failAttempt")
    field = "error"

    def report(self, attempt_id: int, data: Any) -> None:
        self.end_with(attempt_id, outcome_of({"action": "fail", **data}))


class ReleaseView(ReportView):
    """``POST workers/attempts/<id>/release/``: hand the attempt back unfinished."""

    serializer_class = EmptySerializer
    schema = report_schema("releaseAttempt")

    def report(self, attempt_id: int, data: Any) -> None:
        if not protocol.release(self.claimant, [attempt_id]):
            raise LeaseLost

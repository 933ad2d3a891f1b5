"""The HTTP API's batch endpoints: a batch's progress and outcome, and its cancel.

Like jobs, a batch is seen only by its owner (the requesting user, or session): any
other batch is a 404, exactly like one that does not exist. docs/http-api.md.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.http.response import HttpResponseBase
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from django_ratequeue.api.batchevents import FINAL_ID, BatchWatch, abatch_stream, batch_stream
from django_ratequeue.api.ids import shown_outcome
from django_ratequeue.api.permissions import request_owner
from django_ratequeue.api.schema import USER_ERRORS, ApiSchema, EventStreamSchema
from django_ratequeue.api.sse import event_response
from django_ratequeue.api.streamcaps import take_stream_seat
from django_ratequeue.api.views import ApiView, EventStreamRenderer
from django_ratequeue.models import FINAL_STATUSES
from django_ratequeue.plugins.batches.grouping import BatchHandle, status_counts
from django_ratequeue.plugins.batches.models import Batch


class BatchSerializer(serializers.Serializer[Any]):
    """A batch as its owner sees it: its state, its jobs' counts by status, its progress.

    ``outcome`` is what its callback receives, once it has finished (else ``null``)."""

    id = serializers.CharField(read_only=True)
    state = serializers.ChoiceField(["open", "sealed", "finished"], read_only=True)
    counts = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    progress = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    sealed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    canceled_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    outcome = serializers.JSONField(read_only=True, allow_null=True)


def batch_view(batch: Batch) -> dict[str, Any]:
    """Return the batch's fields with its live counts, as :class:`BatchSerializer` shows."""
    counts = status_counts(batch.pk)
    done = sum(counts[status] for status in FINAL_STATUSES)
    state = "finished" if batch.finished_at else "sealed" if batch.sealed_at else "open"
    return {
        "id": batch.pk,
        "state": state,
        "counts": {str(status): n for status, n in counts.items()},
        "progress": {"done": done, "total": sum(counts.values())},
        "created_at": batch.created_at,
        "sealed_at": batch.sealed_at,
        "canceled_at": batch.canceled_at,
        "finished_at": batch.finished_at,
        "outcome": shown_outcome(batch.outcome) if batch.finished_at else None,
    }


class OwnedBatch(ApiView):
    """A view of one of the requesting user's batches."""

    serializer_class = BatchSerializer

    def owned_batch(self, batch_id: str) -> Batch:
        """Return the request's own batch ``batch_id``, else raise a 404."""
        owner = request_owner(self.request, create=False)
        batch = None if owner is None else Batch.objects.filter(pk=batch_id, owner=owner).first()
        if batch is None:
            raise NotFound("There is no such batch.")
        return batch


class BatchView(OwnedBatch):
    """``GET batches/<id>/``: the batch, its jobs' counts by status and its progress."""

    schema = ApiSchema("getBatch", {200: BatchSerializer}, errors=(*USER_ERRORS, 404))

    def get(self, request: Request, batch_id: str) -> Response:
        return Response(BatchSerializer(batch_view(self.owned_batch(batch_id))).data)


class BatchCancelView(OwnedBatch):
    """``POST batches/<id>/cancel/``: ask for every job of the batch to be canceled; 202."""

    schema = ApiSchema(
        "cancelBatch", {202: BatchSerializer}, errors=(*USER_ERRORS, 404), body=False
    )

    def post(self, request: Request, batch_id: str) -> Response:
        batch = self.owned_batch(batch_id)
        BatchHandle(batch.pk, owner=batch.owner or None).cancel()
        batch.refresh_from_db()
        return Response(BatchSerializer(batch_view(batch)).data, status=status.HTTP_202_ACCEPTED)


class BatchEventsView(OwnedBatch):
    """``GET batches/<id>/events/``: the batch's progress as Server-Sent Events.

    ``progress`` events (``{"done", "total", "counts"}``) as its jobs end, then one
    ``finished`` event with its outcome (id ``end``: sent back, it gets a 204)."""

    renderer_classes = [JSONRenderer, EventStreamRenderer]
    schema = EventStreamSchema("getBatchEvents", errors=(*USER_ERRORS, 404))

    def get(self, request: Request, batch_id: str) -> HttpResponseBase:
        batch = self.owned_batch(batch_id)
        if request.headers.get("Last-Event-ID") == FINAL_ID and batch.finished_at is not None:
            return HttpResponse(status=status.HTTP_204_NO_CONTENT)
        hold = take_stream_seat(request, batch.owner)
        watch = BatchWatch(batch.pk)
        return event_response(request, hold, batch_stream(watch), abatch_stream(watch))

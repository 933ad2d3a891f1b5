"""OpenTelemetry: a request, its enqueues and their attempts (retries, callbacks and
subtasks too) make one trace, exported with the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_ratequeue import enqueue
from django_ratequeue.models import Job
from django_ratequeue.tracing import TRACEPARENT_LENGTH
from tests.queue import jobs
from tests.queue.steps import freeze, run_pass

pytestmark = pytest.mark.django_db


class Recorder(InMemorySpanExporter):
    """Keep the spans ended while ``on``: the provider stays for the process's other tests."""

    on = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return super().export(spans) if self.on else SpanExportResult.SUCCESS


EXPORTER = Recorder()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this test ends, exported in memory (the provider is set once a process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    EXPORTER.on = True
    yield EXPORTER
    EXPORTER.on = False
    EXPORTER.clear()


def named(finished: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name.startswith(prefix)]


def test_a_request_its_enqueue_and_its_attempts_make_one_trace(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    frozen = freeze(monkeypatch)
    quick: Any = {"retry_count": 1, "initial_interval": 1, "randomize_interval": False}
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        retried = enqueue(jobs.fail_once, args=[str(tmp_path / "m")], retries=quick)
        parent = enqueue(jobs.spawn, args=[2], on_complete=jobs.echo)
    for _ in range(4):
        run_pass()
        frozen.advance(1.5)
    run_pass()
    run_pass()

    finished = spans.get_finished_spans()
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in finished if s.name != "request"} == {trace_id}
    enqueues = named(finished, "enqueue ")
    runs = named(finished, "run ")
    # The two enqueues in the request, the subtask's inside the parent's attempt, and the
    # loop's of the parent's callback.
    assert sorted(s.name for s in enqueues) == [
        "enqueue tests.queue.jobs.add",
        "enqueue tests.queue.jobs.echo",
        "enqueue tests.queue.jobs.fail_once",
        "enqueue tests.queue.jobs.spawn",
    ]
    assert all(s.kind == SpanKind.PRODUCER for s in enqueues)
    by_name = {s.name: s for s in enqueues}
    request_id = request.get_span_context().span_id
    assert by_name["enqueue tests.queue.jobs.spawn"].parent.span_id == request_id
    # Both tries of the retried job continue its enqueue's span; the first is an error.
    tries = [s for s in runs if s.name == "run tests.queue.jobs.fail_once"]
    enqueued = by_name["enqueue tests.queue.jobs.fail_once"].context.span_id
    assert [s.parent.span_id for s in tries] == [enqueued, enqueued]
    assert [s.attributes["ratequeue.outcome"] for s in tries] == ["failed", "succeeded"]
    assert [s.status.status_code for s in tries] == [StatusCode.ERROR, StatusCode.UNSET]
    assert all(s.kind == SpanKind.CONSUMER for s in runs)
    assert tries[0].attributes["ratequeue.job_id"] == retried.id
    # The subtask was enqueued inside the parent's attempt; the callback's enqueue (by the
    # loop) continues the parent's enqueue, and its run the callback's enqueue.
    (spawned,) = [s for s in runs if s.name == "run tests.queue.jobs.spawn"]
    child_enqueue = by_name["enqueue tests.queue.jobs.add"]
    assert child_enqueue.parent.span_id == spawned.context.span_id
    (callback,) = [s for s in runs if s.name == "run tests.queue.jobs.echo"]
    callback_enqueue = by_name["enqueue tests.queue.jobs.echo"]
    assert (
        callback_enqueue.parent.span_id
        == by_name["enqueue tests.queue.jobs.spawn"].context.span_id
    )
    assert callback.parent.span_id == callback_enqueue.context.span_id
    assert parent.result(timeout=0)


def test_a_job_keeps_its_enqueue_span_as_w3c_traceparent(spans: InMemorySpanExporter) -> None:
    handle = enqueue(jobs.add, args=[1, 2])
    (span,) = spans.get_finished_spans()
    traceparent = Job.objects.get(pk=handle.id).traceparent
    assert len(traceparent) == TRACEPARENT_LENGTH
    assert traceparent == (
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}"
        f"-{int(span.context.trace_flags):02x}"
    )

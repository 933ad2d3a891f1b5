"""OpenTelemetry spans of enqueues and attempts, when ``opentelemetry-api`` is installed.

An enqueue runs in a span of its own, and each job stores that span's W3C
``traceparent``; every attempt of the job (retries too) runs in a span that continues it,
so a request, its enqueues and their attempts make one trace. Without the package every
function here does nothing. docs/tracing.md tells what each span carries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import Context
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # an extra: pip install django-ratequeue[otel]
    trace = None  # type: ignore[assignment]

INSTRUMENTATION = "django_ratequeue"
# A W3C traceparent: "00-" 32 hex "-" 16 hex "-" 2 hex.
TRACEPARENT_LENGTH = 55


def enabled() -> bool:
    """Say whether spans are made: ``opentelemetry-api`` is installed."""
    return trace is not None


def current_traceparent() -> str:
    """Return the W3C traceparent of the current span, "" without one (or without OTel)."""
    if trace is None:
        return ""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    value = carrier.get("traceparent", "")
    return value if len(value) == TRACEPARENT_LENGTH else ""


@contextmanager
def enqueue_span(func: str, queue: str, follows: str | None = None) -> Iterator[None]:
    """Run an enqueue of ``func``'s jobs in a producer span (no-op without OTel).

    The span is a child of the current one, or with ``follows`` of that W3C traceparent
    (a new trace when it is "": the loop's callback of a job enqueued without one)."""
    if trace is None:
        yield
        return
    tracer = trace.get_tracer(INSTRUMENTATION)
    attributes: dict[str, Any] = {"ratequeue.function": func, "ratequeue.queue": queue}
    parent = None
    if follows is not None:
        parent = TraceContextTextMapPropagator().extract(
            {"traceparent": follows} if follows else {}
        )
    with tracer.start_as_current_span(
        f"enqueue {func}", context=parent, kind=SpanKind.PRODUCER, attributes=attributes
    ):
        yield


def start_attempt(traceparent: str, attributes: dict[str, Any], run_in: Context) -> Any:
    """Start an attempt's consumer span, continuing its job's ``traceparent``.

    The span is made current in ``run_in``, the context the job's call runs in, so
    that what the job enqueues continues the trace. Return it (None without OTel) for
    :func:`end_attempt`."""
    if trace is None:
        return None
    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    span = trace.get_tracer(INSTRUMENTATION).start_span(
        f"run {attributes.get('ratequeue.function', '')}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    )
    run_in.run(otel_context.attach, trace.set_span_in_context(span))
    return span


def end_attempt(span: Any, outcome: str, error: str = "") -> None:
    """End an attempt's span with its outcome: an error status unless it succeeded."""
    if span is None:
        return
    span.set_attribute("ratequeue.outcome", str(outcome))
    if outcome != "succeeded":
        span.set_status(Status(StatusCode.ERROR, error[:500] or outcome))
    span.end()

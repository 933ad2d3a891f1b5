"""Observability switched on in a benchmark's processes (bench.overhead's ON runs).

``RATEQUEUE_BENCH_TRACING=1`` adds this app (bench/settings.py); its ``ready`` installs an
OpenTelemetry SDK tracer provider whose batch processor hands every span to an exporter
that drops it (the spans are made, batched and exported, with no I/O), and connects a
receiver to each of the queue's lifecycle signals. Every process that sets Django up
(the enqueuing one, the cluster's) runs it before any job.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig

# Spans exported and signals heard in this process; ``RATEQUEUE_BENCH_COUNTS=1`` prints
# them (to the worker's log) at each export, to check that the ON runs do the work.
COUNTS = {"spans": 0, "signals": 0}


def heard(**_: Any) -> None:
    """Count one lifecycle signal: a receiver that does next to nothing."""
    COUNTS["signals"] += 1


def install() -> None:
    """Set the SDK's tracer provider and connect ``heard`` to every lifecycle signal."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from django_ratequeue.signals import SIGNALS

    class DroppingExporter(SpanExporter):
        """Take each batch of spans and drop it."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            COUNTS["spans"] += len(spans)
            if os.environ.get("RATEQUEUE_BENCH_COUNTS") == "1":
                print(f"observed {os.getpid()}: {COUNTS}", file=sys.stderr, flush=True)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))
    trace.set_tracer_provider(provider)
    for signal in SIGNALS.values():
        signal.connect(heard, weak=False, dispatch_uid="bench.observed")


class ObservedConfig(AppConfig):
    name = "bench.observed"
    label = "bench_observed"

    def ready(self) -> None:
        install()

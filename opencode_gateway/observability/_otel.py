"""The OpenTelemetry SDK's side of observability/traces.py, imported only when traces are asked for (the `otel`
extra): the tracer provider with ids a trace's root can fix, and an OTLP exporter behind a bounded
batch queue that warns, once, when the collector cannot be reached."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

__all__ = ["provider"]

log = logging.getLogger("opencode_gateway.traces")


def provider(
    endpoint: str | None,
    headers: Mapping[str, str],
    service_name: str,
    fixed: contextvars.ContextVar[tuple[int, int] | None],
    *,
    queue: int,
    timeout_s: float,
) -> TracerProvider:
    """A tracer provider sending to `endpoint` (None: the OTEL_EXPORTER_OTLP_* variables say where)."""
    traces = TracerProvider(
        resource=Resource.create({"service.name": service_name}), id_generator=FixedIds(fixed), shutdown_on_exit=False
    )
    exporter = WarningExporter(OTLPSpanExporter(endpoint=endpoint, headers=dict(headers) or None, timeout=timeout_s))
    traces.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=queue, export_timeout_millis=timeout_s * 1000)
    )
    return traces


class FixedIds(IdGenerator):
    """The SDK's ids: random, but a root's fixed ones while `Tracing._ids_of` says so."""

    def __init__(self, fixed: contextvars.ContextVar[tuple[int, int] | None]) -> None:
        self.fixed = fixed
        self.random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        fixed = self.fixed.get()
        return fixed[0] if fixed else self.random.generate_trace_id()

    def generate_span_id(self) -> int:
        fixed = self.fixed.get()
        return fixed[1] if fixed else self.random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return True  # a fixed id is a hash: as random as the SDK's


class WarningExporter(SpanExporter):
    """The OTLP exporter, saying once (a warning on stderr) when the collector cannot be reached
    or refuses them (and once more if it fails again after it was back): the run goes on."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.failing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception as exc:  # the SDK's thread must not die of it
            result, reason = SpanExportResult.FAILURE, type(exc).__name__
        else:
            reason = "it refused them"
        if result != SpanExportResult.SUCCESS and not self.failing:
            self.failing = True
            log.warning(
                "traces could not be sent to the OpenTelemetry collector (%s); runs go on, and later "
                "traces are sent when it is back",
                reason,
            )
        elif result == SpanExportResult.SUCCESS:
            self.failing = False
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

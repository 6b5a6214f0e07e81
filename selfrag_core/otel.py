"""OpenTelemetry spans from a query's trace (optional: ``pip install 'selfrag[otel]'``).

A finished query's :class:`~selfrag_core.types.Trace` maps onto spans after the fact:
one span for the query, a child span for each LLM call (``llm <purpose>``: attempts,
tokens, error) and each retrieval (``retrieval <backend>``: query, top_k, hits), and a
span event on the query span for each fallback and progress note. Nothing is recorded
while the query runs, so tracing costs the query nothing; the spans carry the times the
trace measured.

    from selfrag_core.otel import emit_spans
    result = strategy.query(question)
    emit_spans(result.trace, name="selfrag.query", attributes={"strategy": "self"})

``selfrag serve --otel`` does this for every query (see ``selfrag_core.serve``). The
spans go to the global tracer provider (configure it as OpenTelemetry's documentation
says, or let :func:`configure_otlp` set up the OTLP exporter from the standard
``OTEL_EXPORTER_OTLP_*`` environment variables).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from selfrag_core.errors import MissingDependencyError
from selfrag_core.types import Trace, TraceEvent

OTEL_HINT = "pip install 'selfrag[otel]' (opentelemetry-sdk and the OTLP exporter)"
#: the instrumentation scope of the spans
SCOPE = "selfrag"


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as e:
        raise MissingDependencyError(f"OpenTelemetry spans need opentelemetry-api: {OTEL_HINT}") from e
    return trace


def emit_spans(
    trace: Trace,
    *,
    name: str = "selfrag.query",
    attributes: Mapping[str, Any] | None = None,
    tracer: Any = None,
) -> Any:
    """Record ``trace`` as spans (see the module docstring) with ``tracer`` (default: the
    global provider's tracer for ``selfrag``), as children of the current span if any.
    Returns the query span. Raises MissingDependencyError without opentelemetry-api."""
    api = _api()
    tracer = tracer if tracer is not None else api.get_tracer(SCOPE)
    # the trace measures with perf_counter: anchor it to the wall clock once
    offset_ns = time.time_ns() - int(time.perf_counter() * 1e9)
    start_ns = offset_ns + int(trace.started_at * 1e9)
    wall = trace.wall_s or trace.elapsed()
    root = tracer.start_span(name, start_time=start_ns, attributes=_query_attributes(trace, attributes))
    context = api.set_span_in_context(root)
    for event in trace.events:
        at = start_ns + int(event.start_s * 1e9)
        if event.kind in ("llm", "retrieval"):
            span = tracer.start_span(
                f"{event.kind} {event.name}", context=context, start_time=at, attributes=_attributes(event)
            )
            if event.error is not None:
                span.set_status(api.Status(api.StatusCode.ERROR, event.error))
            span.end(end_time=at + int(event.latency_s * 1e9))
        else:
            root.add_event(f"{event.kind} {event.name}", attributes=_attributes(event), timestamp=at)
    root.end(end_time=start_ns + int(wall * 1e9))
    return root


def _query_attributes(trace: Trace, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "selfrag.llm_calls": trace.llm_calls,
        "selfrag.retrievals": trace.retrievals,
        "selfrag.fallbacks": len(trace.fallbacks),
        "selfrag.input_tokens": trace.input_tokens,
        "selfrag.output_tokens": trace.output_tokens,
    }
    attributes.update({f"selfrag.{k}": _value(v) for k, v in (extra or {}).items()})
    return attributes


def _attributes(event: TraceEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {"selfrag.attempts": event.attempts}
    if event.input_tokens is not None:
        attributes["selfrag.input_tokens"] = event.input_tokens
    if event.output_tokens is not None:
        attributes["selfrag.output_tokens"] = event.output_tokens
    if event.error is not None:
        attributes["selfrag.error"] = event.error
    for key, value in event.detail.items():
        attributes[f"selfrag.{key}"] = _value(value)
    return attributes


def _value(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts (str, bool, int, float; else its text)."""
    return value if isinstance(value, (str, bool, int, float)) else str(value)[:1000]


def configure_otlp() -> None:
    """Install a global tracer provider that sends spans with the OTLP exporter
    (endpoint, headers and protocol from the standard ``OTEL_EXPORTER_OTLP_*`` and
    ``OTEL_SERVICE_NAME`` environment variables), unless one is installed already.
    Raises MissingDependencyError without the SDK or the exporter."""
    api = _api()
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        raise MissingDependencyError(f"--otel needs the OpenTelemetry SDK and exporter: {OTEL_HINT}") from e
    if isinstance(api.get_tracer_provider(), TracerProvider):
        return  # configured already (by the application, or opentelemetry-instrument)
    service = os.environ.get("OTEL_SERVICE_NAME", "selfrag")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    api.set_tracer_provider(provider)

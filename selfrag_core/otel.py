"""OpenTelemetry spans from a query's trace (optional: ``pip install 'selfrag[otel]'``),
named as the OpenTelemetry GenAI semantic conventions say.

A finished query's :class:`~selfrag_core.types.Trace` maps onto spans after the fact:

* the query: an ``invoke_workflow {strategy}`` span (``gen_ai.operation.name``
  ``invoke_workflow``, ``gen_ai.workflow.name``, the query's ``gen_ai.usage.*`` totals,
  ``selfrag.llm_calls``, ``selfrag.retrievals``, ``selfrag.fallbacks``);
* each LLM call: a ``chat {model}`` or ``text_completion {model}`` span (``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.request.model`` where the LLM tells it,
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` where it reports them,
  ``gen_ai.output.type`` ``json`` for a JSON step, ``gen_ai.request.stream``, ``error.type``;
  ``selfrag.purpose``, ``selfrag.attempts``, ``selfrag.prompt_chars``). A decomposition
  call (RecursiveRAG's ``decompose``) is the child of a ``plan`` span;
* each retrieval: a ``retrieval {data source}`` span (``gen_ai.data_source.id``,
  ``gen_ai.request.top_k``, ``selfrag.hits``, ``selfrag.backend``);
* each judge's verdict (SelfIRAG's confidence, SelfHealingRAG's faithfulness score of an
  attempt): a ``gen_ai.evaluation.result`` event on the span of the answer it judged
  (``gen_ai.evaluation.name`` ``judge`` or ``faithfulness``, ``gen_ai.evaluation.score.value``,
  ``gen_ai.evaluation.score.label`` ``pass``/``fail``, or ``unknown`` for an unreadable verdict);
* every other note (fallbacks, progress, decisions): an event ``{kind} {name}`` on the query span.

Content is left out unless asked for (``capture_content=True``, or the conventions'
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``): then the retrieval's
``gen_ai.retrieval.query.text``, and, where the query ran with
``ExecutionConfig(record_content=True)`` (the trace keeps them only then), the calls'
``gen_ai.input.messages`` / ``gen_ai.output.messages`` and the documents' text. The
retrieved documents' ids and scores (``gen_ai.retrieval.documents``) come with the content,
or alone with ``capture_documents=True``. Structured values are JSON strings, as the
conventions allow on spans. Nothing is recorded while the query runs, so tracing costs the
query nothing; the spans carry the times the trace measured.

    from selfrag_core.otel import emit_spans
    result = strategy.query(question)
    emit_spans(result.trace, workflow="self")

``selfrag serve --otel`` does this for every query (see ``selfrag_core.serve``). The
spans go to the global tracer provider (configure it as OpenTelemetry's documentation
says, or let :func:`configure_otlp` set up the OTLP exporter from the standard
``OTEL_EXPORTER_OTLP_*`` environment variables).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from selfrag_core.errors import MissingDependencyError
from selfrag_core.types import Trace, TraceEvent

OTEL_HINT = "pip install 'selfrag[otel]' (opentelemetry-sdk and the OTLP exporter)"
#: the instrumentation scope of the spans
SCOPE = "selfrag"
#: the conventions followed: open-telemetry/semantic-conventions-genai (status: development)
SEMCONV = "OpenTelemetry GenAI semantic conventions (semantic-conventions-genai, on semconv 1.41.1)"
#: the conventions' switch for capturing content (prompts, replies, documents' text)
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: LLM calls that decompose a question (a ``plan`` span each)
PLAN_PURPOSES = frozenset({"decompose"})
#: LLM calls whose reply is an answer a verdict may judge
ANSWER_PURPOSES = frozenset({"answer", "answer_and_evaluate", "refine", "merge"})
#: the trace's note for a judge's verdict, and the evaluation it stands for by its detail
VERDICT = "verdict"


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as e:
        raise MissingDependencyError(f"OpenTelemetry spans need opentelemetry-api: {OTEL_HINT}") from e
    return trace


def capture_content_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for content:
    ``true`` / ``1`` / ``yes``, or the newer ``span_only`` / ``span_and_event``."""
    value = (os.environ if environ is None else environ).get(CAPTURE_CONTENT_ENV, "")
    return value.strip().lower() in ("true", "1", "yes", "span_only", "span_and_event")


def emit_spans(
    trace: Trace,
    *,
    workflow: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    tracer: Any = None,
    capture_content: bool | None = None,
    capture_documents: bool | None = None,
    name: str | None = None,
) -> Any:
    """Record ``trace`` as spans (see the module docstring) with ``tracer`` (default: the
    global provider's tracer for ``selfrag``), as children of the current span if any.

    ``workflow``: the strategy's name (``gen_ai.workflow.name``; default
    ``attributes["strategy"]``). ``attributes``: more attributes of the query span, as
    ``selfrag.<key>`` (a ``status`` of 500 or more marks it failed). ``capture_content``:
    None reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. ``capture_documents``:
    the retrieved documents' ids and scores (None: as ``capture_content``). ``name``: the
    query span's name instead of ``invoke_workflow {workflow}``.
    Returns the query span. Raises MissingDependencyError without opentelemetry-api."""
    api = _api()
    tracer = tracer if tracer is not None else api.get_tracer(SCOPE)
    content = capture_content_from_env() if capture_content is None else capture_content
    documents = content if capture_documents is None else capture_documents
    extra = dict(attributes or {})
    workflow = workflow if workflow is not None else extra.get("strategy")
    # the trace measures with perf_counter: anchor it to the wall clock once
    offset_ns = time.time_ns() - int(time.perf_counter() * 1e9)
    start_ns = offset_ns + int(trace.started_at * 1e9)
    wall = trace.wall_s or trace.elapsed()
    root = tracer.start_span(
        name or " ".join(["invoke_workflow", *([str(workflow)] if workflow else [])]),
        start_time=start_ns,
        kind=api.SpanKind.INTERNAL,
        attributes=_workflow_attributes(trace, workflow, extra),
    )
    status = extra.get("status")
    if isinstance(status, int) and status >= 500:
        root.set_attribute("error.type", str(status))
        root.set_status(api.Status(api.StatusCode.ERROR, f"HTTP {status}"))
    context = api.set_span_in_context(root)
    answered = root  # the span of the latest answer: what a verdict judges
    ends: list[tuple[Any, int]] = []  # spans end last, once the verdicts on them are added
    for event in trace.events:
        at = start_ns + int(event.start_s * 1e9)
        end = at + int(event.latency_s * 1e9)
        if event.kind == "llm":
            parent = context
            if event.name in PLAN_PURPOSES:  # the decomposition call is the child of a plan span
                plan = _span(api, tracer, context, at, "plan", {"gen_ai.operation.name": "plan"}, event)
                ends.append((plan, end))
                parent = api.set_span_in_context(plan)
            span = _span(api, tracer, parent, at, _llm_name(event), _llm_attributes(event, content), event)
            ends.append((span, end))
            if event.name in ANSWER_PURPOSES:
                answered = span
        elif event.kind == "retrieval":
            attributes = _retrieval_attributes(event, content, documents)
            span_name = f"retrieval {attributes['gen_ai.data_source.id']}"
            ends.append((_span(api, tracer, context, at, span_name, attributes, event), end))
        elif event.name == VERDICT:
            answered.add_event("gen_ai.evaluation.result", attributes=_evaluation(event), timestamp=at)
        else:
            root.add_event(f"{event.kind} {event.name}", attributes=_note_attributes(event), timestamp=at)
    for span, end in ends:
        span.end(end_time=end)
    root.end(end_time=start_ns + int(wall * 1e9))
    return root


def _span(
    api: Any, tracer: Any, context: Any, at: int, name: str, attributes: dict[str, Any], event: TraceEvent
) -> Any:
    """A child span of ``context`` for ``event`` (a plan is internal, a call a client's)."""
    kind = api.SpanKind.INTERNAL if name == "plan" else api.SpanKind.CLIENT
    span = tracer.start_span(name, context=context, start_time=at, kind=kind, attributes=attributes)
    _failed(api, span, event)
    return span


def _failed(api: Any, span: Any, event: TraceEvent) -> None:
    """Mark ``span`` failed by ``event``'s error (``error.type``: the exception's class)."""
    if event.error is not None:
        span.set_attribute("error.type", event.error.partition(":")[0] or "_OTHER")
        span.set_status(api.Status(api.StatusCode.ERROR, event.error))


def _workflow_attributes(trace: Trace, workflow: Any, extra: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.usage.input_tokens": trace.input_tokens,
        "gen_ai.usage.output_tokens": trace.output_tokens,
        "selfrag.llm_calls": trace.llm_calls,
        "selfrag.retrievals": trace.retrievals,
        "selfrag.fallbacks": len(trace.fallbacks),
    }
    if workflow:
        attributes["gen_ai.workflow.name"] = str(workflow)
    attributes.update({f"selfrag.{k}": _value(v) for k, v in extra.items()})
    return attributes


def _llm_name(event: TraceEvent) -> str:
    model = event.detail.get("model")
    operation = str(event.detail.get("operation", "text_completion"))
    return f"{operation} {model}" if model else operation


def _llm_attributes(event: TraceEvent, content: bool) -> dict[str, Any]:
    d = event.detail
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": str(d.get("operation", "text_completion")),
        "gen_ai.provider.name": str(d.get("provider", "unknown")),
        "selfrag.purpose": event.name,
        "selfrag.attempts": event.attempts,
    }
    if d.get("model"):
        attributes["gen_ai.request.model"] = str(d["model"])
    if event.input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = event.input_tokens
    if event.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = event.output_tokens
    if d.get("output_type"):
        attributes["gen_ai.output.type"] = str(d["output_type"])
    if d.get("stream"):
        attributes["gen_ai.request.stream"] = True
    if "prompt_chars" in d:
        attributes["selfrag.prompt_chars"] = d["prompt_chars"]
    if content and isinstance(d.get("prompt"), str):
        attributes["gen_ai.input.messages"] = _json([_message("user", d["prompt"])])
    if content and isinstance(d.get("reply"), str):
        attributes["gen_ai.output.messages"] = _json(
            [{**_message("assistant", d["reply"]), "finish_reason": "stop"}]
        )
    return attributes


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _retrieval_attributes(event: TraceEvent, content: bool, documents: bool) -> dict[str, Any]:
    d = event.detail
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": str(d.get("data_source") or event.name),
        "selfrag.backend": event.name,
    }
    if isinstance(d.get("top_k"), int):
        attributes["gen_ai.request.top_k"] = float(d["top_k"])  # a double in the conventions
    if "hits" in d:
        attributes["selfrag.hits"] = d["hits"]
    if content and isinstance(d.get("query"), str):
        attributes["gen_ai.retrieval.query.text"] = d["query"]
    if documents and isinstance(d.get("documents"), list):
        found = [_document(doc, content) for doc in d["documents"] if isinstance(doc, Mapping)]
        attributes["gen_ai.retrieval.documents"] = _json(found)
    return attributes


def _document(doc: Mapping[str, Any], content: bool) -> dict[str, Any]:
    out = {"id": doc.get("id"), "score": doc.get("score")}
    if content and isinstance(doc.get("text"), str):
        out["content"] = doc["text"]
    return out


def _evaluation(event: TraceEvent) -> dict[str, Any]:
    """A verdict note as the conventions' evaluation result: SelfHealingRAG's has the
    attempt's ``score`` against a ``threshold``; SelfIRAG's the judge's ``confidence``."""
    d = event.detail
    faithfulness = "score" in d
    score = d.get("score") if faithfulness else d.get("confidence")
    attributes: dict[str, Any] = {"gen_ai.evaluation.name": "faithfulness" if faithfulness else "judge"}
    if isinstance(score, (int, float)):
        attributes["gen_ai.evaluation.score.value"] = float(score)
    if faithfulness:
        attributes["gen_ai.evaluation.score.label"] = "pass" if d.get("passed") else "fail"
        attributes["selfrag.threshold"] = _value(d.get("threshold"))
        attributes["selfrag.strategy"] = _value(d.get("strategy"))
    elif score is None:
        attributes["gen_ai.evaluation.score.label"] = "unknown"  # the verdict could not be read
    if isinstance(d.get("scores"), list):
        attributes["selfrag.scores"] = [int(s) for s in d["scores"] if isinstance(s, (int, float))]
    return attributes


def _note_attributes(event: TraceEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if event.error is not None:
        attributes["selfrag.error"] = event.error
    for key, value in event.detail.items():
        attributes[f"selfrag.{key}"] = _value(value)
    return attributes


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


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

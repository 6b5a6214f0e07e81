"""OpenTelemetry spans from a query's trace (selfrag_core.otel), with the SDK's in-memory
exporter: one span per query, a child per LLM call and retrieval, fallbacks as events."""

from __future__ import annotations

from typing import Any

import pytest

from selfrag_core import HyDERAG, PlainRAG
from selfrag_core.errors import MissingDependencyError
from selfrag_core.testing import FakeLLM, FakeRetriever

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="pip install 'selfrag[otel]'")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from selfrag_core.otel import emit_spans  # noqa: E402

DOCS = ["Paris is the capital of France.", "Berlin is the capital of Germany."]
Q = "What is the capital of France?"


@pytest.fixture
def spans() -> Any:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_a_query_becomes_a_span_with_a_child_per_call_and_retrieval(spans: Any) -> None:
    tracer, exporter = spans
    result = PlainRAG(FakeRetriever(DOCS), FakeLLM("Paris.")).query(Q)
    emit_spans(result.trace, tracer=tracer, attributes={"strategy": "plain"})
    finished = {s.name: s for s in exporter.get_finished_spans()}
    assert set(finished) == {"selfrag.query", "retrieval FakeRetriever", "llm answer"}
    root, llm = finished["selfrag.query"], finished["llm answer"]
    retrieval = finished["retrieval FakeRetriever"]
    assert llm.parent is not None and llm.parent.span_id == root.context.span_id
    assert retrieval.parent is not None and retrieval.parent.span_id == root.context.span_id
    assert root.attributes["selfrag.strategy"] == "plain" and root.attributes["selfrag.llm_calls"] == 1
    assert retrieval.attributes["selfrag.hits"] == 2 and retrieval.attributes["selfrag.top_k"] == 5
    assert llm.attributes["selfrag.attempts"] == 1
    # the trace's times: the retrieval comes first, every child ends within the query
    assert root.start_time <= retrieval.start_time <= retrieval.end_time <= llm.start_time
    assert llm.end_time <= root.end_time


def test_fallbacks_are_events_and_failed_calls_are_errors(spans: Any) -> None:
    tracer, exporter = spans
    failing = FakeRetriever(DOCS, fail=RuntimeError("vector db down"))
    result = HyDERAG(failing, FakeLLM("Paris is the capital of France, a city on the Seine river.")).query(Q)
    emit_spans(result.trace, tracer=tracer)
    finished = exporter.get_finished_spans()
    root = next(s for s in finished if s.name == "selfrag.query")
    assert any(e.name == "fallback retrieval_failed" for e in root.events)
    failed = [s for s in finished if s.name.startswith("retrieval")]
    assert failed and all(s.status.status_code.name == "ERROR" for s in failed)
    assert "vector db down" in str(failed[0].attributes["selfrag.error"])


def test_without_opentelemetry_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_otel(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("opentelemetry"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    result = PlainRAG(FakeRetriever(DOCS), FakeLLM("Paris.")).query(Q)
    with pytest.raises(MissingDependencyError, match=r"selfrag\[otel\]"):
        emit_spans(result.trace)


async def test_the_service_records_each_query_as_spans_when_otel_is_on() -> None:
    """``selfrag serve --otel`` / ``SELFRAG_OTEL=1``: every query's trace goes to the
    global tracer provider (an application's own, here an in-memory one)."""
    pytest.importorskip("fastapi")
    import httpx
    from opentelemetry import trace as otel_trace

    from selfrag_core.serve import ServeSettings, create_app

    exporter = InMemorySpanExporter()
    provider = otel_trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):  # the first test to need one sets it
        provider = sdk_trace.TracerProvider()
        otel_trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert ServeSettings.from_env({"SELFRAG_OTEL": "1"}).otel
    rag, llm = FakeRetriever(DOCS), FakeLLM("Paris.")
    app = create_app(
        rag=rag, llm=llm, strategies={"plain": PlainRAG(rag, llm)}, settings=ServeSettings(otel=True)
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://selfrag") as client:
        response = await client.post("/query/plain", json={"question": Q})
    assert response.status_code == 200
    [root] = [s for s in exporter.get_finished_spans() if s.name == "selfrag.query"]
    assert root.attributes["selfrag.strategy"] == "plain" and root.attributes["selfrag.status"] == 200
    assert {s.name for s in exporter.get_finished_spans()} >= {"llm answer", "retrieval FakeRetriever"}

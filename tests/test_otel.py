"""OpenTelemetry spans from a query's trace (selfrag_core.otel), named as the GenAI semantic
conventions say, received by the SDK's in-memory exporter: an ``invoke_workflow`` span per
query, a ``text_completion``/``chat`` span per LLM call, a ``retrieval`` span per search, a
``plan`` span around a decomposition, verdicts as ``gen_ai.evaluation.result`` events, and
content only when asked for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fault_helpers import build, obedient

from selfrag_core import ConfigurationError, ExecutionConfig, HyDERAG, LLMOutput, PlainRAG
from selfrag_core.errors import MissingDependencyError
from selfrag_core.llm import llm_identity
from selfrag_core.retrieval import data_source_id
from selfrag_core.testing import FakeLLM, FakeRetriever

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="pip install 'selfrag[otel]'")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from selfrag_core.otel import CAPTURE_CONTENT_ENV, emit_spans  # noqa: E402

DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
]
Q = "What is the capital of France?"
# long enough, with keywords, for RecursiveRAG to decompose it
COMPLEX = "What are the capitals of France and Germany, and how do the two cities compare in size?"
SUBS = ["What is the capital of France?", "What is the capital of Germany?"]
MODEL = "fake-model-1"


class NamedLLM(FakeLLM):
    """The scripted fake, naming its provider and model and reporting token counts."""

    provider = "selfrag.testing"
    model = MODEL

    def generate(self, prompt: str) -> Any:
        return LLMOutput(super().generate(prompt), input_tokens=len(prompt.split()), output_tokens=3)

    async def agenerate(self, prompt: str) -> Any:
        return LLMOutput(await super().agenerate(prompt), input_tokens=len(prompt.split()), output_tokens=3)


def script(prompt: str) -> str:
    """Decomposes, merges, judges everything perfect and answers "Paris."."""
    if "SUBQUESTIONS:" in prompt:
        return json.dumps({"items": SUBS})
    if "Combine the answers" in prompt:
        return "Paris is the capital of France and Berlin is the capital of Germany."
    return obedient(prompt)


@pytest.fixture
def spans() -> Any:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def strategy(name: str, execution: ExecutionConfig | None = None) -> Any:
    backend, llm = FakeRetriever(list(DOCS)), NamedLLM(script)
    execution = execution or ExecutionConfig(sleep=lambda _: None)
    return (
        PlainRAG(backend, llm, execution=execution)
        if name == "plain"
        else build(name, backend, llm, execution)
    )


async def run(rag: Any, mode: str, question: str) -> Any:
    if mode == "sync":
        return rag.query(question)
    if mode == "async":
        return await rag.aquery(question)
    if mode == "stream":
        return [e for e in rag.stream(question) if e.kind == "result"][-1].result
    return [e async for e in rag.astream(question) if e.kind == "result"][-1].result


def children(span: Any, finished: list[Any]) -> list[Any]:
    return [s for s in finished if s.parent is not None and s.parent.span_id == span.context.span_id]


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
@pytest.mark.parametrize("name", ["plain", "self", "hyde", "recursive", "healing"])
async def test_every_strategy_sends_the_genai_span_tree(spans: Any, name: str, mode: str) -> None:
    tracer, exporter = spans
    result = await run(strategy(name), mode, COMPLEX if name == "recursive" else Q)
    trace = result.trace
    emit_spans(trace, tracer=tracer, workflow=name)
    finished = list(exporter.get_finished_spans())
    [root] = [s for s in finished if s.parent is None]
    assert root.name == f"invoke_workflow {name}" and root.kind is SpanKind.INTERNAL
    attrs = root.attributes
    assert attrs["gen_ai.operation.name"] == "invoke_workflow" and attrs["gen_ai.workflow.name"] == name
    assert attrs["gen_ai.usage.input_tokens"] == trace.input_tokens > 0
    assert attrs["gen_ai.usage.output_tokens"] == trace.output_tokens > 0
    assert attrs["selfrag.llm_calls"] == trace.llm_calls and attrs["selfrag.retrievals"] == trace.retrievals

    calls = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "text_completion"]
    llm_events = [e for e in trace.events if e.kind == "llm"]
    assert [s.attributes["selfrag.purpose"] for s in calls] == [e.name for e in llm_events]
    for span, event in zip(calls, llm_events, strict=True):
        assert span.name == f"text_completion {MODEL}" and span.kind is SpanKind.CLIENT
        assert span.attributes["gen_ai.provider.name"] == "selfrag.testing"
        assert span.attributes["gen_ai.request.model"] == MODEL
        assert span.attributes["gen_ai.usage.input_tokens"] == event.input_tokens
        assert span.attributes["gen_ai.usage.output_tokens"] == 3
        assert "gen_ai.input.messages" not in span.attributes  # content only when asked for
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in calls) == trace.input_tokens

    searches = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "retrieval"]
    assert len(searches) == trace.retrievals > 0
    for span in searches:
        assert span.name == "retrieval FakeRetriever" and span.parent.span_id == root.context.span_id
        assert span.attributes["gen_ai.data_source.id"] == "FakeRetriever"
        assert span.attributes["gen_ai.request.top_k"] == 5.0 and span.attributes["selfrag.hits"] >= 1
        assert "gen_ai.retrieval.documents" not in span.attributes
        assert "gen_ai.retrieval.query.text" not in span.attributes

    plans = [s for s in finished if s.name == "plan"]
    if name == "recursive":  # the decomposition call is the child of the plan span
        [plan] = plans
        assert (
            plan.attributes["gen_ai.operation.name"] == "plan" and plan.parent.span_id == root.context.span_id
        )
        assert [s.attributes["selfrag.purpose"] for s in children(plan, finished)] == ["decompose"]
        assert result.decomposed and {"answer", "merge"} <= {s.attributes["selfrag.purpose"] for s in calls}
    else:
        assert plans == []
        assert all(s.parent.span_id == root.context.span_id for s in calls)

    verdicts = [(s, e) for s in finished for e in s.events if e.name == "gen_ai.evaluation.result"]
    if name in ("self", "healing"):  # on the answer it judged
        assert verdicts and all(
            s.attributes["selfrag.purpose"] in ("answer", "answer_and_evaluate") for s, _ in verdicts
        )
        evaluation = verdicts[-1][1].attributes
        assert evaluation["gen_ai.evaluation.name"] == ("judge" if name == "self" else "faithfulness")
        assert evaluation["gen_ai.evaluation.score.value"] > 0.5
        if name == "healing":
            assert evaluation["gen_ai.evaluation.score.label"] == "pass"
    else:
        assert verdicts == []
    if name == "hyde":
        assert any(s.attributes["selfrag.purpose"] == "hyde_document" for s in calls)
    # every child ends within the query
    assert all(root.start_time <= s.start_time <= s.end_time <= root.end_time for s in finished)


def test_content_and_documents_only_when_asked_for(spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tracer, exporter = spans
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    result = strategy("plain").query(Q)
    events = result.trace.events  # prompts, replies and texts are not kept unless recorded
    assert not any({"prompt", "reply"} & set(e.detail) for e in events)
    [retrieval] = [e for e in events if e.kind == "retrieval"]
    assert retrieval.detail["documents"] and all("text" not in d for d in retrieval.detail["documents"])
    emit_spans(result.trace, tracer=tracer, capture_documents=True)
    search = next(s for s in exporter.get_finished_spans() if s.name.startswith("retrieval"))
    docs = json.loads(search.attributes["gen_ai.retrieval.documents"])
    assert [d["id"] for d in docs] == [d["id"] for d in retrieval.detail["documents"]] == ["doc-0", "doc-1"]
    assert all(set(d) == {"id", "score"} and isinstance(d["score"], float) for d in docs)
    assert "gen_ai.retrieval.query.text" not in search.attributes

    exporter.clear()
    recorded = strategy("plain", ExecutionConfig(record_content=True)).query(Q)
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")  # the conventions' switch
    emit_spans(recorded.trace, tracer=tracer)
    finished = exporter.get_finished_spans()
    call = next(s for s in finished if s.attributes.get("selfrag.purpose") == "answer")
    [asked] = json.loads(call.attributes["gen_ai.input.messages"])
    assert asked["role"] == "user" and Q in asked["parts"][0]["content"]
    [said] = json.loads(call.attributes["gen_ai.output.messages"])
    assert said["role"] == "assistant" and said["parts"][0]["content"] == "Paris."
    search = next(s for s in finished if s.name.startswith("retrieval"))
    assert search.attributes["gen_ai.retrieval.query.text"] == Q
    docs = json.loads(search.attributes["gen_ai.retrieval.documents"])
    assert {d["content"] for d in docs} <= set(DOCS) and docs

    exporter.clear()
    emit_spans(recorded.trace, tracer=tracer, capture_content=False)  # the parameter wins
    assert not any("gen_ai.input.messages" in s.attributes for s in exporter.get_finished_spans())


def test_record_content_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="record_content must be True or False"):
        ExecutionConfig(record_content="yes")  # type: ignore[arg-type]


def test_fallbacks_are_events_and_failed_calls_are_errors(spans: Any) -> None:
    tracer, exporter = spans
    failing = FakeRetriever(DOCS, fail=RuntimeError("vector db down"))
    result = HyDERAG(failing, FakeLLM("Paris is the capital of France, a city on the Seine river.")).query(Q)
    emit_spans(result.trace, tracer=tracer)
    finished = exporter.get_finished_spans()
    root = next(s for s in finished if s.parent is None)
    assert root.name == "invoke_workflow"  # no workflow name given
    assert any(e.name == "fallback retrieval_failed" for e in root.events)
    failed = [s for s in finished if s.name.startswith("retrieval")]
    assert failed and all(s.status.status_code.name == "ERROR" for s in failed)
    assert all(s.attributes["error.type"] == "RetrievalError" for s in failed)
    assert "vector db down" in str(failed[0].status.description)


def test_what_the_llms_and_backends_tell_of_themselves(tmp_path: Path) -> None:
    from selfrag_core.openai_llm import OpenAICompatibleLLM

    assert llm_identity(OpenAICompatibleLLM("gpt-4o-mini", api_key="k")) == {
        "provider": "openai", "operation": "chat", "model": "gpt-4o-mini",
    }  # fmt: skip
    assert llm_identity(FakeLLM()) == {"provider": "selfrag_core", "operation": "text_completion"}
    assert llm_identity(NamedLLM())["model"] == MODEL

    class Collection:
        collection_name = "papers"

    assert data_source_id(Collection()) == "papers" and data_source_id(FakeRetriever([])) == "FakeRetriever"
    pytest.importorskip("selfrag_core.store.rag")
    from selfrag_core.store.rag import RAG

    assert data_source_id(RAG(path=tmp_path / "notes")) == "notes"  # the index's folder


def test_langchain_and_llamaindex_models_tell_their_provider_and_kind() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.language_models import FakeListChatModel, FakeListLLM

    assert llm_identity(FakeListChatModel(responses=["a"]))["operation"] == "chat"
    assert llm_identity(FakeListLLM(responses=["a"])) == {
        "provider": "fakelist",
        "operation": "text_completion",
    }
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import MockLLM

    assert llm_identity(MockLLM()) == {"provider": "mockllm", "operation": "text_completion"}  # no model name


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
    [root] = [s for s in exporter.get_finished_spans() if s.name == "invoke_workflow plain"]
    assert root.attributes["gen_ai.workflow.name"] == "plain" and root.attributes["selfrag.status"] == 200
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"text_completion", "retrieval FakeRetriever"} <= names

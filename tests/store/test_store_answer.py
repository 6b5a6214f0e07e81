"""RAG.query on the engine: a trace, an ExecutionConfig's budget and timeouts, errors raised
as the search or the LLM raised them, hits as searched; RetrieveThenAnswer as a strategy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, LLMOutput, Strategy, observe_trace
from selfrag_core.errors import BudgetExceededError, ConfigurationError, LLMTimeoutError
from selfrag_core.store import RAG, HashingEmbeddings, QueryResult, RetrieveThenAnswer
from selfrag_core.testing import FakeLLM
from selfrag_core.types import TraceEvent

DOCS = {
    "paris": "Paris is the capital of France. The city lies on the river Seine.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "nile": "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
}


def make(**kwargs: Any) -> RAG:
    rag = RAG(**kwargs)
    rag.index_many([{"text": t, "source": s} for s, t in DOCS.items()])
    return rag


async def ask(rag: RAG, mode: str, question: str, **options: Any) -> QueryResult:
    return rag.query(question, **options) if mode == "sync" else await rag.aquery(question, **options)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_query_has_a_trace_of_one_search_and_one_llm_call(mode: str) -> None:
    class Reporting:
        """An LLM that reports its token usage."""

        n_calls = 0

        def generate(self, prompt: str) -> LLMOutput:
            self.n_calls += 1
            return LLMOutput("Berlin.", input_tokens=120, output_tokens=3)

    llm = Reporting()
    rag = make(generate_fn=llm)
    seen: list[TraceEvent] = []
    with observe_trace(seen.append):
        result = await ask(rag, mode, "What is the capital of Germany?", top_k=2)
    retrieval, call = result.trace.events
    assert retrieval.kind == "retrieval" and retrieval.error is None
    searched = {k: retrieval.detail[k] for k in ("query", "top_k", "hits")}
    assert searched == {"query": "What is the capital of Germany?", "top_k": 2, "hits": 2}
    assert call.kind == "llm" and call.name == "rag_answer" and call.attempts == 1
    assert (call.input_tokens, call.output_tokens) == (120, 3)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.attempts) == (120, 3, 1)
    assert result.trace.llm_calls == llm.n_calls == 1 and result.trace.retrievals == 1
    assert result.duration == result.trace.wall_s > 0
    assert seen == result.trace.events
    assert result.to_dict()["trace"]["input_tokens"] == 120


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_no_llm_event_when_the_llm_is_not_asked(mode: str) -> None:
    llm = FakeLLM("unused")
    result = await ask(make(generate_fn=llm), mode, "zzzz unknown words", allow_llm_on_empty=False)
    assert not result.llm_called and llm.n_calls == 0
    assert [e.kind for e in result.trace.events] == ["retrieval"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_execution_budget_bounds_the_llm_attempts(mode: str, instant: ExecutionConfig) -> None:
    llm = FakeLLM("Berlin.", fail_on=[1, 2])
    rag = make(generate_fn=llm, execution=replace(instant, max_llm_calls=2))
    with pytest.raises(BudgetExceededError):
        await ask(rag, mode, "capital of Germany")  # two attempts fail, the budget refuses the third
    assert llm.n_calls == 2
    unbounded = make(generate_fn=FakeLLM("Berlin.", fail_on=[1, 2]), execution=instant)
    assert (await ask(unbounded, mode, "capital of Germany")).usage.attempts == 3


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_execution_llm_timeout_applies_and_generate_timeout_overrides_it(mode: str) -> None:
    rag = make(
        generate_fn=FakeLLM("late", latency=0.3), llm_retries=0, execution=ExecutionConfig(llm_timeout=0.05)
    )
    with pytest.raises(LLMTimeoutError):
        await ask(rag, mode, "capital")
    assert (await ask(rag, mode, "capital", generate_timeout=5)).answer == "late"
    assert rag.execution.llm_timeout == 0.05  # per query only


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_search_errors_are_raised_as_the_search_raises_them(mode: str) -> None:
    class Broken(HashingEmbeddings):
        def embed_query(self, text: str) -> Any:
            raise RuntimeError("embedder down")

        embed_queries = None  # embed_query per query

    rag = make(generate_fn=FakeLLM("unused"))
    with pytest.raises(TypeError, match="metadata_filter"):
        await ask(rag, mode, "capital", metadata_filter="source=paris")
    with pytest.raises(ConfigurationError, match="top_k"):
        await ask(rag, mode, "capital", top_k=0)
    with pytest.raises(RuntimeError, match="embedder down"):
        await ask(make(embed=Broken(), generate_fn=FakeLLM("unused")), mode, "capital")


def test_hits_are_the_searched_chunks_even_when_they_begin_alike() -> None:
    heading = (
        "Company handbook, chapter on travel and expenses, applies to every employee and contractor alike. "
    )
    rag = RAG(generate_fn=FakeLLM("ok"))
    rag.index(heading + "Trains are booked in second class.", source="trains")
    rag.index(heading + "Flights are booked in economy class.", source="flights")
    result = rag.query("How are trains and flights booked?")
    assert sorted(result.sources) == ["flights", "trains"] and len(result.hits) == 2
    assert "second class" in result.prompt and "economy class" in result.prompt


def test_execution_must_be_an_execution_config() -> None:
    with pytest.raises(TypeError, match="ExecutionConfig"):
        RAG(execution={"max_llm_calls": 1})  # type: ignore[arg-type]


async def test_retrieve_then_answer_is_a_strategy_that_streams_and_takes_filters() -> None:
    rag = make()
    strategy = RetrieveThenAnswer(rag, FakeLLM("The Nile."), top_k=2, filters={"source": ["nile", "paris"]})
    assert isinstance(strategy, Strategy)
    result = strategy.query("Which river?", {"metadata_filter": {"source": "nile"}})
    assert isinstance(result, QueryResult) and result.sources == ["nile"]
    events = list(strategy.stream("Which river?"))
    assert "".join(e.text for e in events if e.kind == "token") == "The Nile."
    final = events[-1].result
    assert final is not None and set(final.sources) == {"nile", "paris"} and final.trace.llm_calls == 1
    assert (await strategy.aquery("Which river?")).answer == "The Nile."
    with pytest.raises(ConfigurationError, match="top_k"):
        RetrieveThenAnswer(rag, FakeLLM(), top_k=0)

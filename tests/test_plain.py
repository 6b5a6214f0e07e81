"""PlainRAG: one retrieval, one grounded answer; the fallbacks; sync, async, streamed."""

from __future__ import annotations

import pytest

from selfrag_core import LLMCallError, PlainRAG, PlainRAGConfig, aretrieve_documents, retrieve_documents
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document

DOCS = [
    "Honeybees communicate with the waggle dance.",
    "Ants leave pheromone trails.",
    "The waggle dance tells the direction of flowers.",
]


def test_one_retrieval_one_call_answer_from_the_documents() -> None:
    llm = FakeLLM(lambda prompt: first_document(prompt, "none"))
    result = PlainRAG(FakeRetriever(DOCS), llm, top_k=2).query("What is the waggle dance for?")
    assert result.answer == "Honeybees communicate with the waggle dance."
    assert [d.text for d in result.sources] == [DOCS[0], DOCS[2]]
    assert len(llm.calls) == 1 and "waggle dance" in llm.calls[0].prompt
    assert result.trace.llm_calls == 1 and result.trace.retrievals == 1


def test_nothing_retrieved_is_not_enough_information_without_a_call() -> None:
    llm = FakeLLM("unused")
    result = PlainRAG(FakeRetriever(DOCS), llm).query("quantum chromodynamics lattice")
    assert result.answer == NOT_ENOUGH_ANSWER and result.sources == []
    assert llm.calls == []
    assert [e.name for e in result.trace.fallbacks] == ["not_enough_information"]


def test_a_failed_llm_gives_the_fallback_answer_and_the_cause_in_the_trace() -> None:
    llm = FakeLLM([LLMCallError("provider down")])
    result = PlainRAG(FakeRetriever(DOCS), llm, llm_retries=0).query("How do honeybees communicate?")
    assert result.answer == GENERATION_FAILED_ANSWER
    assert any("provider down" in (e.error or "") for e in result.trace.fallbacks)


async def test_async_and_streamed_give_the_same_answer() -> None:
    strategy = PlainRAG(FakeRetriever(DOCS), FakeLLM("They dance."))
    question = "How do honeybees communicate?"
    assert (await strategy.aquery(question)).answer == "They dance."
    events = list(strategy.stream(question))
    tokens = "".join(e.text for e in events if e.kind == "token")
    assert tokens == "They dance." and events[-1].result.answer == "They dance."


@pytest.mark.parametrize("top_k", [0, -1, 1.5, "3"])
def test_top_k_is_validated(top_k: object) -> None:
    with pytest.raises((ValueError, TypeError), match="top_k"):
        PlainRAG(FakeRetriever(DOCS), FakeLLM(), top_k=top_k)  # type: ignore[arg-type]


async def test_retrieve_documents_of_a_strategy_without_its_own_ranking_are_its_answers_sources() -> None:
    """What both adapters' retrievers return for a strategy with no ``documents_plan``:
    the sources of its answer, at most ``top_k``, sync and async alike."""
    llm = FakeLLM(lambda prompt: first_document(prompt, "none"))
    plain = PlainRAG(FakeRetriever(DOCS), llm, config=PlainRAGConfig(top_k=2))
    docs = retrieve_documents(plain, "What is the waggle dance for?", top_k=1)
    assert [d.text for d in docs] == [DOCS[0]] and len(llm.calls) == 1  # it answered once
    both = await aretrieve_documents(plain, "What is the waggle dance for?")
    assert [d.text for d in both] == [DOCS[0], DOCS[2]]

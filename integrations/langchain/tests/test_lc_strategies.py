"""Every strategy of the library through the runnable and the retriever, over real
langchain-core objects (InMemoryVectorStore + DeterministicFakeEmbedding, a chat model)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from lc_fakes import ANSWER, CORPUS, RunTree, keyed_model, strategies, vector_store

from selfrag_langchain import LangChainLLM, SelfRAGRunnable, StrategyRetriever, as_backend

QUESTION = "What is the capital of France and which river flows through Paris?"
NAMES = ["SelfIRAG", "HyDERAG", "RecursiveRAG", "SelfHealingRAG"]


def build(name: str, model: Any = None) -> Any:
    llm = LangChainLLM(model or keyed_model(structured=True))
    return strategies(as_backend(vector_store()), llm)[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_runs_in_lcel(name: str, run_tree: RunTree) -> None:
    out = SelfRAGRunnable(strategy=build(name)).invoke({"question": QUESTION}, {"callbacks": [run_tree]})
    assert ANSWER in out["answer"]
    assert out["sources"] and all(
        isinstance(d, Document) and d.page_content in CORPUS for d in out["sources"]
    )
    assert out["trace"]["llm_calls"] >= 1 and out["trace"]["input_tokens"] > 0
    assert out["trace"]["fallbacks"] == []
    chain = f"SelfRAG[{name}]"
    assert run_tree.of_kind("llm") and run_tree.of_kind("retriever")
    assert all(
        chain in run_tree.ancestors(r) for r in run_tree.of_kind("llm") + run_tree.of_kind("retriever")
    )


@pytest.mark.parametrize("name", NAMES)
async def test_every_strategy_runs_async(name: str) -> None:
    out = await SelfRAGRunnable(strategy=build(name)).ainvoke(QUESTION)
    assert ANSWER in out["answer"] and out["sources"]


def test_self_healing_reports_its_scores_as_confidence() -> None:
    out = SelfRAGRunnable(strategy=build("SelfHealingRAG")).invoke(QUESTION)
    assert out["strategy"] == "SelfHealingReport"
    assert out["confidence"] == max(out["details"]["scores"])
    assert out["details"]["success"] is True


@pytest.mark.parametrize("name", NAMES)
def test_strategy_as_retriever(name: str) -> None:
    retriever = StrategyRetriever(strategy=build(name), k=2)
    docs = retriever.invoke(QUESTION)
    assert 1 <= len(docs) <= 2 and all(d.page_content in CORPUS for d in docs)


def test_hyde_retriever_uses_the_fused_ranking_without_answering(run_tree: RunTree) -> None:
    model = keyed_model(structured=True)
    retriever = StrategyRetriever(strategy=build("HyDERAG", model))
    docs = retriever.invoke(QUESTION, {"callbacks": [run_tree]}, k=3)
    assert len(docs) == 3
    assert len(model.prompts) == 2  # two hypothetical documents, no answer call
    assert all("StrategyRetriever" in run_tree.ancestors(r) for r in run_tree.of_kind("llm"))


async def test_hyde_retriever_async() -> None:
    docs = await StrategyRetriever(strategy=build("HyDERAG")).ainvoke(QUESTION, k=4)
    assert len(docs) == 4


def test_a_plain_generic_fake_chat_model_works_without_structured_output() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(ANSWER)] * 20))
    out = SelfRAGRunnable(strategy=build("HyDERAG", model)).invoke(QUESTION)
    assert out["answer"] == ANSWER


def test_retriever_rejects_a_bad_k() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        StrategyRetriever(strategy=build("SelfIRAG"), k=0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        StrategyRetriever(strategy=build("SelfIRAG")).invoke(QUESTION, k=0)

"""A real vector database server: Chroma (`chroma run`), through langchain-chroma and
chromadb.HttpClient, as the backend of all four strategies. Embeddings are supplied
(DeterministicFakeEmbedding): nothing downloads a model."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from lc_fakes import ANSWER, CORPUS, RunTree, keyed_model, strategies

from selfrag_core import ScoreKind
from selfrag_langchain import LangChainLLM, SelfRAGRunnable, StrategyRetriever, as_backend, raw_score_kind

pytestmark = [
    pytest.mark.integration,
    # LangChain's own warning: unnormalised fake embeddings give l2 relevance scores outside [0, 1]
    pytest.mark.filterwarnings("ignore:Relevance scores must be between 0 and 1"),
]

QUESTION = "What is the capital of France and which river flows through Paris?"
NAMES = ["SelfIRAG", "HyDERAG", "RecursiveRAG", "SelfHealingRAG"]


@pytest.fixture(scope="module")
def chroma_store(chroma_client: Any) -> Any:
    from langchain_chroma import Chroma

    store = Chroma(
        collection_name=f"selfrag-{uuid.uuid4().hex[:8]}",
        client=chroma_client,
        embedding_function=DeterministicFakeEmbedding(size=64),
    )
    store.add_documents(
        [Document(page_content=t, metadata={"n": i}, id=f"d{i}") for i, t in enumerate(CORPUS)]
    )
    return store


def test_server_holds_the_documents(chroma_client: Any, chroma_store: Any) -> None:
    names = [c.name for c in chroma_client.list_collections()]
    assert chroma_store._collection.name in names
    assert chroma_store._collection.count() == len(CORPUS)


def test_scores_relevance_and_raw_distance(chroma_store: Any) -> None:
    assert raw_score_kind(chroma_store) is ScoreKind.DISTANCE
    similar = as_backend(chroma_store).retrieve(QUESTION, top_k=3)
    raw = as_backend(chroma_store, scores="raw").retrieve(QUESTION, top_k=3)
    assert [d.text for d in similar] == [d.text for d in raw]
    assert {d.score_kind for d in similar} == {ScoreKind.SIMILARITY}
    assert {d.score_kind for d in raw} == {ScoreKind.DISTANCE}
    assert [d.score for d in raw] == sorted(d.score or 0 for d in raw)


async def test_async_path_and_filters(chroma_store: Any) -> None:
    backend = as_backend(chroma_store, filter={"n": 2})
    docs = await backend.aretrieve(QUESTION, top_k=4)
    assert [d.text for d in docs] == [CORPUS[2]]


@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_over_the_chroma_server(chroma_store: Any, name: str, run_tree: RunTree) -> None:
    backend = as_backend(chroma_store, scores="raw")  # raw l2 distances through every strategy
    strategy = strategies(backend, LangChainLLM(keyed_model(structured=True)))[name]
    out = SelfRAGRunnable(strategy=strategy).invoke(QUESTION, {"callbacks": [run_tree]})
    assert ANSWER in out["answer"]
    assert out["trace"]["fallbacks"] == [] and out["trace"]["retrievals"] >= 1
    assert out["sources"] and all(d.page_content in CORPUS for d in out["sources"])
    assert run_tree.of_kind("retriever")


@pytest.mark.parametrize("name", NAMES)
async def test_every_strategy_async_over_the_chroma_server(chroma_store: Any, name: str) -> None:
    strategy = strategies(as_backend(chroma_store), LangChainLLM(keyed_model(structured=True)))[name]
    out = await SelfRAGRunnable(strategy=strategy).ainvoke({"question": QUESTION})
    assert ANSWER in out["answer"] and out["sources"]
    docs = await StrategyRetriever(strategy=strategy, k=2).ainvoke(QUESTION)
    assert 1 <= len(docs) <= 2

"""langchain-community backends: BM25Retriever (rank_bm25) and FAISS (faiss-cpu, L2
distances) under all four strategies."""

from __future__ import annotations

import warnings

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from lc_fakes import ANSWER, CORPUS, keyed_model, strategies

from selfrag_core import ScoreKind
from selfrag_langchain import LangChainLLM, SelfRAGRunnable, as_backend, raw_score_kind

pytestmark = pytest.mark.integration
pytest.importorskip("langchain_community", reason="pip install 'selfrag-langchain[community]'")
BM25Retriever = pytest.importorskip("langchain_community.retrievers", reason="rank_bm25").BM25Retriever
FAISS = pytest.importorskip("langchain_community.vectorstores", reason="faiss-cpu").FAISS
pytest.importorskip("rank_bm25", reason="pip install rank-bm25")
pytest.importorskip("faiss", reason="pip install faiss-cpu")

QUESTION = "What is the capital of France and which river flows through Paris?"
NAMES = ["SelfIRAG", "HyDERAG", "RecursiveRAG", "SelfHealingRAG"]
DOCS = [Document(page_content=t, metadata={"n": i}) for i, t in enumerate(CORPUS)]


def faiss_store() -> object:
    return FAISS.from_documents(DOCS, DeterministicFakeEmbedding(size=64))


def test_bm25_k_is_set_per_call() -> None:
    backend = as_backend(BM25Retriever.from_documents(DOCS))  # k defaults to 4
    docs = backend.retrieve("capital of France Paris", top_k=2)
    assert len(docs) == 2 and docs[0].text == CORPUS[0]
    assert all(d.score_kind is ScoreKind.UNKNOWN for d in docs)


def test_faiss_raw_scores_are_l2_distances() -> None:
    store = faiss_store()
    assert raw_score_kind(store) is ScoreKind.DISTANCE
    docs = as_backend(store, scores="raw").retrieve(QUESTION, top_k=4)
    assert all(d.score_kind is ScoreKind.DISTANCE for d in docs)
    distances = [d.score for d in docs]
    assert distances == sorted(distances)  # nearest first: lower is better
    assert docs[0].similarity == -distances[0]


def test_faiss_relevance_scores_are_similarities() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FAISS warns when unnormalised vectors leave [0, 1]
        docs = as_backend(faiss_store()).retrieve(QUESTION, top_k=3)
    assert all(d.score_kind is ScoreKind.SIMILARITY for d in docs)


@pytest.mark.parametrize("backend_name", ["bm25", "faiss"])
@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_over_community_backends(name: str, backend_name: str) -> None:
    store = BM25Retriever.from_documents(DOCS) if backend_name == "bm25" else faiss_store()
    backend = as_backend(store) if backend_name == "bm25" else as_backend(store, scores="raw")
    strategy = strategies(backend, LangChainLLM(keyed_model(structured=True)))[name]
    out = SelfRAGRunnable(strategy=strategy).invoke(QUESTION)
    assert ANSWER in out["answer"]
    assert out["sources"] and all(d.page_content in CORPUS for d in out["sources"])
    assert out["trace"]["fallbacks"] == []
    if backend_name == "faiss" and name in ("SelfIRAG", "RecursiveRAG"):  # sources as retrieved
        assert {d.metadata["score_kind"] for d in out["sources"]} == {"distance"}


class QuerylessEmbedding(DeterministicFakeEmbedding):
    """Embeds documents, but cannot embed a query (as a misconfigured embeddings object)."""

    def embed_query(self, text: str) -> list[float]:
        raise TypeError("embed_query() got an unexpected keyword argument 'input_type'")


@pytest.mark.parametrize("name", NAMES)
async def test_a_store_whose_embeddings_cannot_embed_queries_is_a_configuration_error(name: str) -> None:
    """Issue 16 §7: every retrieval raised TypeError, and the library answered "The answer
    is not available" after seven LLM calls with no context. Now the query stops at once."""
    from selfrag_core import ConfigurationError

    store = FAISS.from_documents(DOCS, QuerylessEmbedding(size=64))
    model = keyed_model(structured=True)
    strategy = strategies(as_backend(store), LangChainLLM(model))[name]
    chain = SelfRAGRunnable(strategy=strategy)
    for run in (chain.invoke, chain.ainvoke):
        with pytest.raises(ConfigurationError, match=r"backend .* raised TypeError: embed_query"):
            result = run(QUESTION)
            if hasattr(result, "__await__"):
                await result

"""as_backend: LangChain retrievers and vector stores as selfrag backends."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from lc_fakes import ANSWER, CORPUS, keyed_model, vector_store

from selfrag_core import RetrievalError, RetrievedDoc, ScoreKind, SelfIRAG, _retrieve_safe
from selfrag_core.testing import FakeRetriever
from selfrag_langchain import LangChainBackend, LangChainLLM, as_backend, from_document, to_document

QUERY = "What is the capital of France?"


class ListRetriever(BaseRetriever):
    """A retriever with no setting for the number of results."""

    texts: list[str]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [Document(page_content=t) for t in self.texts]


class BrokenRetriever(BaseRetriever):
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        raise ConnectionError("index offline")


def test_in_memory_store_has_no_relevance_scores_so_raw_cosine_similarities_are_used() -> None:
    store = vector_store()
    with pytest.raises(NotImplementedError):  # the fact the fallback exists for
        store.similarity_search_with_relevance_scores(QUERY, k=2)
    docs = as_backend(store).retrieve(QUERY, top_k=3)
    assert len(docs) == 3
    assert all(d.score_kind is ScoreKind.SIMILARITY for d in docs)
    expected = [score for _, score in store.similarity_search_with_score(QUERY, k=3)]
    assert [d.score for d in docs] == pytest.approx(expected)
    assert all(set(d.metadata) == {"n"} for d in docs)  # the score is not left in the metadata
    assert docs[0].id in {f"d{i}" for i in range(len(CORPUS))}


async def test_async_vector_store_path_matches_sync() -> None:
    backend = as_backend(vector_store())
    sync_docs = backend.retrieve(QUERY, top_k=4)
    async_docs = await backend.aretrieve(QUERY, top_k=4)
    assert [d.text for d in async_docs] == [d.text for d in sync_docs]


def test_retriever_k_is_set_per_call_on_a_copy() -> None:
    retriever = vector_store().as_retriever()  # search_kwargs default k=4
    backend = as_backend(retriever)
    assert len(backend.retrieve(QUERY, top_k=2)) == 2
    assert len(backend.retrieve(QUERY, top_k=6)) == 6
    assert retriever.search_kwargs == {}  # the user's retriever is untouched


async def test_retriever_without_k_is_cut_at_top_k() -> None:
    backend = as_backend(ListRetriever(texts=CORPUS))
    assert [d.text for d in backend.retrieve(QUERY, top_k=2)] == CORPUS[:2]
    assert len(await backend.aretrieve(QUERY, top_k=3)) == 3
    assert backend.retrieve(QUERY)[0].score_kind is ScoreKind.UNKNOWN


def test_retriever_raising_is_a_retrieval_error_and_a_visible_fallback() -> None:
    backend = as_backend(BrokenRetriever())
    with pytest.raises(RetrievalError, match="index offline"):
        _retrieve_safe(backend, QUERY, 3)
    result = SelfIRAG(backend, LangChainLLM(keyed_model(structured=True))).query(QUERY)
    assert "retrieval_failed" in [f.name for f in result.trace.fallbacks]
    assert "ConnectionError: index offline" in (result.trace.fallbacks[0].error or "")
    assert result.sources == []


def test_documents_round_trip_with_scores() -> None:
    doc = RetrievedDoc("text", 0.25, {"source": "a.txt"}, "id-1", ScoreKind.DISTANCE)
    lc_doc = to_document(doc)
    assert lc_doc.metadata == {"source": "a.txt", "score": 0.25, "score_kind": "distance"}
    assert from_document(lc_doc) == doc
    # a user's own "score" without a score_kind is metadata, not a score
    plain = from_document(Document(page_content="x", metadata={"score": 3}))
    assert (plain.score, plain.metadata) == (None, {"score": 3})


def test_as_backend_rejects_other_objects_and_is_idempotent() -> None:
    with pytest.raises(TypeError, match="BaseRetriever or VectorStore"):
        as_backend(FakeRetriever(CORPUS))
    backend = as_backend(vector_store())
    assert as_backend(backend) is backend
    assert isinstance(backend, LangChainBackend)
    with pytest.raises(ValueError, match="search_kwargs apply to vector stores"):
        as_backend(ListRetriever(texts=[]), filter={"n": 1})


def test_search_kwargs_reach_the_store() -> None:
    backend = as_backend(vector_store(), filter=lambda doc: doc.metadata["n"] == 2)
    assert [d.text for d in backend.retrieve(QUERY, top_k=5)] == [CORPUS[2]]


def test_strategy_answers_from_a_vector_store_and_a_chat_model() -> None:
    result = SelfIRAG(as_backend(vector_store()), LangChainLLM(keyed_model(structured=True))).query(QUERY)
    assert result.answer == ANSWER
    assert result.sources and all(d.score_kind is ScoreKind.SIMILARITY for d in result.sources)


def test_a_store_with_unscored_search_only_gives_its_documents_unscored() -> None:
    """A minimal ``VectorStore`` subclass (only ``similarity_search``), given to the core
    directly or through ``as_backend``, sync and async: ranked documents, score unknown."""
    import asyncio

    from langchain_core.vectorstores import VectorStore

    from selfrag_core.retrieval import _aretrieve_safe

    docs = [Document(page_content=f"doc {i} about Paris", metadata={"n": i}, id=f"d{i}") for i in range(6)]

    class MinimalStore(VectorStore):
        def add_texts(self, texts, metadatas=None, **kwargs):  # type: ignore[no-untyped-def]
            return []

        @classmethod
        def from_texts(cls, texts, embedding, metadatas=None, **kwargs):  # type: ignore[no-untyped-def]
            return cls()

        def similarity_search(self, query, k=4, **kwargs):  # type: ignore[no-untyped-def]
            return docs[:k]

    store, backend = MinimalStore(), as_backend(MinimalStore())
    found = [
        _retrieve_safe(store, "q", 3),
        asyncio.run(_aretrieve_safe(store, "q", 3)),
        backend.retrieve("q", 3),
        asyncio.run(backend.aretrieve("q", 3)),
    ]
    for got in found:
        assert [d.id for d in got] == ["d0", "d1", "d2"] and [d.metadata for d in got] == [
            {"n": 0},
            {"n": 1},
            {"n": 2},
        ]
        assert all(d.score is None and d.score_kind is ScoreKind.UNKNOWN for d in got)

"""The backend conformance suite (:mod:`selfrag_core.conformance`) against a LangChain
``InMemoryVectorStore`` (selfrag's hashing embeddings) wrapped by ``as_backend``, with
and without a text splitter."""

from __future__ import annotations

import pytest
from langchain_core.indexing import InMemoryRecordManager
from langchain_core.vectorstores import InMemoryVectorStore

from selfrag_core.conformance import BackendConformance
from selfrag_core.ingest import chunk_id, ingest
from selfrag_langchain import SelfRAGEmbeddings, as_backend
from selfrag_langchain.backends import LangChainBackend


def _store() -> InMemoryVectorStore:
    return InMemoryVectorStore(SelfRAGEmbeddings("hashing"))


class TestInMemoryVectorStore(BackendConformance):
    @pytest.fixture
    def backend(self) -> LangChainBackend:
        return as_backend(_store())


class Halves:
    """A text splitter: the text cut at its middle space."""

    def split_text(self, text: str) -> list[str]:
        cut = text.find(" ", len(text) // 2)
        return [text[:cut], text[cut + 1 :]] if cut > 0 else [text]


def test_chunks_are_stored_under_stable_ids_and_a_shared_ledger_deletes_them() -> None:
    store, ledger = _store(), InMemoryRecordManager("shared")
    text = "Paris is the capital of France and lies on the Seine."
    ingest(as_backend(store, record_manager=ledger, text_splitter=Halves()), [{"text": text, "source": "fr"}])
    first, second = Halves().split_text(text)
    assert set(store.store) == {chunk_id("fr", first), chunk_id("fr", second)}
    other = as_backend(store, record_manager=ledger)  # another process's backend, the same ledger
    assert other.count() == 2 and other.delete("fr") == 2 and not store.store


def test_a_retriever_alone_cannot_be_written_to() -> None:
    backend = as_backend(_store().as_retriever())
    with pytest.raises(TypeError, match="as_backend\\(vectorstore\\)"):
        backend.add_documents([{"text": "Paris.", "source": "fr"}])
    with pytest.raises(ValueError, match="vector stores"):
        as_backend(_store().as_retriever(), text_splitter=Halves())

"""``SelfRAGEmbeddings``: selfrag's embedders as a LangChain ``Embeddings``, in real vector
stores (``InMemoryVectorStore``; FAISS when installed) with the hashing embedder."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from selfrag_core.backends import embedders as local_embeddings
from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.store import HashingEmbeddings
from selfrag_langchain import SelfRAGEmbeddings

TEXTS = [
    "Honeybees dance to show the other bees where the flowers are.",
    "Volcanoes erupt when gas pressure breaks the rock above them.",
    "The Nile flows north into the Mediterranean Sea.",
]
QUESTION = "Why do volcanoes erupt?"


def _plain(vector: list[float]) -> bool:
    return isinstance(vector, list) and all(type(x) is float for x in vector)


def test_it_is_a_langchain_embeddings_returning_plain_floats() -> None:
    emb = SelfRAGEmbeddings(HashingEmbeddings(64))
    assert isinstance(emb, Embeddings)
    query = emb.embed_query(QUESTION)
    assert _plain(query) and len(query) == 64
    docs = emb.embed_documents(TEXTS)
    assert len(docs) == 3 and all(_plain(row) and len(row) == 64 for row in docs)
    assert np.allclose(docs[1], HashingEmbeddings(64).embed_query(TEXTS[1]))
    assert emb.embed_documents([]) == []
    assert emb.name == HashingEmbeddings(64).name


def test_in_memory_vector_store_finds_the_right_document() -> None:
    store = InMemoryVectorStore(SelfRAGEmbeddings(HashingEmbeddings()))
    store.add_texts(TEXTS, metadatas=[{"n": i} for i in range(3)])
    hits = store.similarity_search(QUESTION, k=1)
    assert [h.metadata["n"] for h in hits] == [1]
    assert store.similarity_search("honeybees and flowers", k=1)[0].page_content == TEXTS[0]


async def test_async_variants_match_the_sync_ones() -> None:
    emb = SelfRAGEmbeddings("hashing")
    assert await emb.aembed_query(QUESTION) == emb.embed_query(QUESTION)
    assert await emb.aembed_documents(TEXTS) == emb.embed_documents(TEXTS)
    store = InMemoryVectorStore(emb)
    await store.aadd_texts(TEXTS)
    hits = await store.asimilarity_search(QUESTION, k=1)
    assert hits[0].page_content == TEXTS[1]


def test_any_embedder_object_numpy_or_lists() -> None:
    class ListEmbedder:
        def embed_documents(self, texts: list[str]) -> list[list[int]]:
            return [[len(t), 1] for t in texts]

        def embed_query(self, text: str) -> np.ndarray:
            return np.array([len(text), 1], dtype=np.float32)

    emb = SelfRAGEmbeddings(ListEmbedder())
    assert emb.embed_documents(["ab", "abc"]) == [[2.0, 1.0], [3.0, 1.0]]
    assert _plain(emb.embed_query("abcd")) and emb.embed_query("abcd") == [4.0, 1.0]
    assert emb.name == "ListEmbedder"


def test_bad_arguments_are_refused_clearly() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown embedder name 'bert'.*minilm, hashing"):
        SelfRAGEmbeddings("bert")
    with pytest.raises(TypeError, match="needs embed_documents and embed_query"):
        SelfRAGEmbeddings(object())
    emb = SelfRAGEmbeddings("hashing")
    with pytest.raises(TypeError, match="use embed_query for one text"):
        emb.embed_documents("one text")  # type: ignore[arg-type]

    class Wrong:
        def embed_documents(self, texts: list[str]) -> Any:
            return np.zeros((1, 4))

        def embed_query(self, text: str) -> Any:
            return np.zeros(4)

    with pytest.raises(ValueError, match=r"shape \(1, 4\) for 2 text"):
        SelfRAGEmbeddings(Wrong()).embed_documents(["a", "b"])


def test_the_default_names_the_extra_when_minilm_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_embeddings, "embeddings_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"selfrag\[local\]"):
        SelfRAGEmbeddings()
    with pytest.raises(MissingDependencyError, match=r"selfrag\[local\]"):
        SelfRAGEmbeddings("minilm")


def test_the_default_loads_minilm_on_first_use_only(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []

    class CountedMiniLM(HashingEmbeddings):
        name = local_embeddings.LocalEmbeddings.name

        def __init__(self) -> None:
            super().__init__(32)
            made.append(self)

    monkeypatch.setattr(local_embeddings, "embeddings_available", lambda: True)
    monkeypatch.setattr(local_embeddings, "LocalEmbeddings", CountedMiniLM)
    emb = SelfRAGEmbeddings()
    assert made == [] and emb.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert len(emb.embed_query("x")) == 32 and len(emb.embed_documents(["y"])[0]) == 32
    assert len(made) == 1 and emb.embedder is made[0]


@pytest.mark.integration
def test_faiss_store_queries_work() -> None:
    pytest.importorskip("faiss", reason="pip install faiss-cpu")
    faiss_module = pytest.importorskip("langchain_community.vectorstores", reason="langchain-community")
    store = faiss_module.FAISS.from_texts(TEXTS, SelfRAGEmbeddings(HashingEmbeddings()))
    assert store.similarity_search(QUESTION, k=1)[0].page_content == TEXTS[1]
    scored = store.similarity_search_with_score("the Nile river", k=3)
    assert scored[0][0].page_content == TEXTS[2]


@pytest.mark.slow
def test_minilm_in_a_vector_store() -> None:
    if not local_embeddings.embeddings_available():
        pytest.skip("pip install 'selfrag[local]'")
    emb = SelfRAGEmbeddings()
    store = InMemoryVectorStore(emb)
    store.add_texts(TEXTS)
    assert store.similarity_search("What makes a mountain explode?", k=1)[0].page_content == TEXTS[1]
    assert len(emb.embed_query("x")) == 384

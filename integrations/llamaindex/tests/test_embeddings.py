"""``SelfRAGEmbedding``: selfrag's embedders as a LlamaIndex ``BaseEmbedding``, in a real
``VectorStoreIndex`` with the hashing embedder; LlamaIndex's default (OpenAI) models are
never resolved."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core import settings as li_settings
from llama_index.core.base.embeddings.base import BaseEmbedding

from selfrag_core.backends import embedders as local_embeddings
from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.store import HashingEmbeddings
from selfrag_llamaindex import SelfRAGEmbedding

pytestmark = pytest.mark.integration

TEXTS = [
    "Honeybees dance to show the other bees where the flowers are.",
    "Volcanoes erupt when gas pressure breaks the rock above them.",
    "The Nile flows north into the Mediterranean Sea.",
]
QUESTION = "Why do volcanoes erupt?"


@pytest.fixture(autouse=True)
def no_default_models(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if LlamaIndex resolves its default LLM or embedding (OpenAI)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"LlamaIndex resolved a default model: {args}")

    monkeypatch.setattr(Settings, "_llm", None)
    monkeypatch.setattr(Settings, "_embed_model", None)
    monkeypatch.setattr(li_settings, "resolve_llm", refuse)
    monkeypatch.setattr(li_settings, "resolve_embed_model", refuse)
    yield


def _plain(vector: list[float]) -> bool:
    return isinstance(vector, list) and all(type(x) is float for x in vector)


def _index() -> VectorStoreIndex:
    docs = [Document(text=t, id_=f"doc{i}") for i, t in enumerate(TEXTS)]
    return VectorStoreIndex.from_documents(docs, embed_model=SelfRAGEmbedding(HashingEmbeddings()))


def test_it_is_a_llamaindex_embedding_returning_plain_floats() -> None:
    emb = SelfRAGEmbedding(HashingEmbeddings(64))
    assert isinstance(emb, BaseEmbedding)
    assert emb.model_name == HashingEmbeddings(64).name and emb.class_name() == "SelfRAGEmbedding"
    query = emb.get_query_embedding(QUESTION)
    assert _plain(query) and len(query) == 64
    rows = emb.get_text_embedding_batch(TEXTS)
    assert len(rows) == 3 and all(_plain(r) and len(r) == 64 for r in rows)
    assert np.allclose(rows[1], HashingEmbeddings(64).embed_query(TEXTS[1]))
    assert emb.get_text_embedding(TEXTS[0]) == rows[0]


def test_vector_store_index_retrieves_the_right_node() -> None:
    retriever = _index().as_retriever(similarity_top_k=1)
    nodes = retriever.retrieve(QUESTION)
    assert len(nodes) == 1 and nodes[0].node.ref_doc_id == "doc1"
    assert retriever.retrieve("honeybees and flowers")[0].node.get_content() == TEXTS[0]


async def test_async_paths() -> None:
    emb = SelfRAGEmbedding("hashing")
    assert await emb.aget_query_embedding(QUESTION) == emb.get_query_embedding(QUESTION)
    assert await emb.aget_text_embedding(TEXTS[0]) == emb.get_text_embedding(TEXTS[0])
    assert await emb.aget_text_embedding_batch(TEXTS) == emb.get_text_embedding_batch(TEXTS)
    nodes = await _index().as_retriever(similarity_top_k=1).aretrieve(QUESTION)
    assert nodes[0].node.ref_doc_id == "doc1"


def test_any_embedder_object_and_batch_size() -> None:
    class ListEmbedder:
        batch_size = 7

        def embed_documents(self, texts: list[str]) -> list[list[int]]:
            return [[len(t), 1] for t in texts]

        def embed_query(self, text: str) -> np.ndarray:
            return np.array([len(text), 1], dtype=np.float32)

    emb = SelfRAGEmbedding(ListEmbedder())
    assert emb.embed_batch_size == 7 and emb.model_name == "ListEmbedder"
    assert emb.get_text_embedding_batch(["ab", "abc"]) == [[2.0, 1.0], [3.0, 1.0]]
    assert emb.get_query_embedding("abcd") == [4.0, 1.0]
    assert SelfRAGEmbedding(ListEmbedder(), embed_batch_size=2).embed_batch_size == 2


def test_bad_arguments_are_refused_clearly() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown embedder name 'bert'.*minilm, hashing"):
        SelfRAGEmbedding("bert")
    with pytest.raises(TypeError, match="needs embed_documents and embed_query"):
        SelfRAGEmbedding(object())


def test_the_default_names_the_extra_when_minilm_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_embeddings, "embeddings_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"selfrag\[local\]"):
        SelfRAGEmbedding()


def test_the_default_loads_minilm_on_first_use_only(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []

    class CountedMiniLM(HashingEmbeddings):
        name = local_embeddings.LocalEmbeddings.name

        def __init__(self) -> None:
            super().__init__(32)
            made.append(self)

    monkeypatch.setattr(local_embeddings, "embeddings_available", lambda: True)
    monkeypatch.setattr(local_embeddings, "LocalEmbeddings", CountedMiniLM)
    emb = SelfRAGEmbedding()
    assert made == [] and emb.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    assert emb.embed_batch_size == 32
    assert len(emb.get_query_embedding("x")) == 32
    assert len(made) == 1 and emb.embedder is made[0]

"""The backend conformance suite (:mod:`selfrag_core.conformance`) against a LlamaIndex
``VectorStoreIndex`` (selfrag's hashing embedder) wrapped by ``as_backend``."""

from __future__ import annotations

import pytest
from llama_index.core import VectorStoreIndex

from selfrag_core.conformance import BackendConformance
from selfrag_llamaindex import SelfRAGEmbedding, as_backend
from selfrag_llamaindex.backend import LlamaIndexBackend


class TestLlamaIndexIndex(BackendConformance):
    @pytest.fixture
    def backend(self) -> LlamaIndexBackend:
        return as_backend(VectorStoreIndex([], embed_model=SelfRAGEmbedding("hashing")))


def test_a_retriever_alone_cannot_be_written_to() -> None:
    index = VectorStoreIndex([], embed_model=SelfRAGEmbedding("hashing"))
    with pytest.raises(TypeError, match="as_backend\\(index\\)"):
        as_backend(index.as_retriever()).add_documents([{"text": "Paris.", "source": "fr"}])

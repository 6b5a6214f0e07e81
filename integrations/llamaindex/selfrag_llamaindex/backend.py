"""Any LlamaIndex retriever or index as the strategies' retrieval backend."""

from __future__ import annotations

import copy
import threading
from contextlib import AbstractContextManager
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.schema import Document

from selfrag_core import RetrievedDoc, content_source, document_parts
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

    Made from an index, it keeps selfrag's write contract
    (:class:`~selfrag_core.ingest.WritableBackend`, and passes the conformance suite):
    ``add_documents`` inserts each document as a LlamaIndex ``Document`` whose id is its
    source (the index's own transformations chunk it), skipping one stored with the same
    hash and replacing one changed; ``delete(source)`` is ``delete_ref_doc``; ``count()``
    the index's nodes; ``sources()`` its documents.
    """

    score_kind = "similarity"

    def __init__(self, retriever: BaseRetriever | None = None, *, index: Any = None) -> None:
        if (retriever is None) == (index is None):
            raise ValueError("give exactly one of retriever or index")
        self.retriever = retriever
        self.index = index
        #: a copy of the retriever is sized per top_k when it has this setting, else sliced
        self._sized = retriever is not None and hasattr(retriever, "similarity_top_k")
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
        if self._sized:
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

    def _writable(self) -> Any:
        if self.index is None:
            raise TypeError("writing needs an index: build the backend with as_backend(index)")
        return self.index

    def _nodes_of(self, source: str) -> list[str]:
        info = self._writable().docstore.get_ref_doc_info(source)
        return [] if info is None else list(info.node_ids)

    def add_documents(self, documents: Any) -> int:
        """Insert the documents (all checked first); the nodes newly stored."""
        index = self._writable()
        parts = [document_parts(doc) for doc in documents]
        added = 0
        for text, source, metadata in parts:
            source = source if source is not None else content_source(text, metadata)
            document = Document(text=text, metadata={**metadata, "source": source}, id_=source)
            stored = self._nodes_of(source)
            if stored and index.docstore.get_document_hash(source) == document.hash:
                continue
            if stored:
                index.delete_ref_doc(source, delete_from_docstore=True)
            index.insert(document)
            added += len(self._nodes_of(source))
        return added

    def delete(self, source: str) -> int:
        """Remove the document ``source`` and its nodes; how many nodes went."""
        nodes = self._nodes_of(source)
        if nodes:
            self._writable().delete_ref_doc(source, delete_from_docstore=True)
        return len(nodes)

    def count(self) -> int:
        """The index's nodes."""
        struct = self._writable().index_struct
        nodes = getattr(struct, "nodes_dict", None)
        if isinstance(nodes, dict):
            return len(nodes)
        return sum(len(self._nodes_of(s)) for s in self.sources())

    def sources(self) -> set[str]:
        """The documents inserted (their ids: the sources)."""
        return set(self._writable().docstore.get_all_ref_doc_info() or {})

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

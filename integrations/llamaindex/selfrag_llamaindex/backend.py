"""Any LlamaIndex retriever or index as the strategies' retrieval backend."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import Document

from selfrag_core.types import RetrievedDoc
from selfrag_llamaindex import _events, _quiet
from selfrag_llamaindex._convert import docs_from_nodes, note
from selfrag_llamaindex._scan import MatrixScan, scanning


class LlamaIndexBackend:
    """A selfrag backend over a LlamaIndex retriever or index (made by :func:`as_backend`).

    ``retrieve(query, top_k)`` / ``aretrieve(query, top_k)`` return ``RetrievedDoc``
    with the node ids kept (for citations) and node scores as similarities (``None``
    where the retriever gives none). The retriever used for a given ``top_k`` is an
    index's ``as_retriever(similarity_top_k=top_k)`` (made for each query, so nodes
    inserted into the index since are found), a copy of the retriever with its
    ``similarity_top_k`` set (never the caller's object, so concurrent queries do not
    race), or the retriever itself with its results sliced. Nodes without text (image
    nodes) are skipped and reported (log and ``response.metadata["adapter_notes"]``).
    A retriever that raises raises here; the core turns it into ``RetrievalError``
    and the strategy's fallback.

    Over LlamaIndex's default in-memory ``SimpleVectorStore`` (an index, or a
    ``VectorIndexRetriever`` of one), the retrievers the backend makes score a query
    with one matrix product instead of the store's per-vector Python loop: the same
    results, about 3 ms less per query for 200 vectors and proportionally more for
    larger stores (see ``selfrag_llamaindex._scan`` for what falls back to the loop).
    ``vectorized=False`` keeps the loop.

    LlamaIndex builds its retrieval events and spans whether or not anything
    receives them: about half the CPU of a retrieval from an in-memory index. With
    ``instrument="observed"`` (the default), a retrieval that nothing observes (no
    callback handler on the retriever or its embedding model, no instrumentation event
    or span handler) runs the retriever's own steps without them (``_aretrieve``; for a
    ``VectorIndexRetriever``, its embedding and vector store query), with the same
    results; attach any handler and the next retrieval reports everything (see
    ``selfrag_llamaindex._quiet``). ``instrument="always"`` always calls the
    retriever's public ``retrieve`` / ``aretrieve``.
    """

    score_kind = "similarity"

    def __init__(
        self,
        retriever: BaseRetriever | None = None,
        *,
        index: Any = None,
        vectorized: bool = True,
        instrument: Literal["observed", "always"] = "observed",
    ) -> None:
        if (retriever is None) == (index is None):
            raise ValueError("give exactly one of retriever or index")
        if instrument not in ("observed", "always"):
            raise ValueError(f"instrument must be 'observed' or 'always', got {instrument!r}")
        self.retriever = retriever
        self.index = index
        self.vectorized = vectorized
        self.instrument = instrument
        self._by_k: dict[int, Any] = {}
        self._scans: dict[int, MatrixScan] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LlamaIndexBackend({type(self.index or self.retriever).__name__})"

    def retriever_for(self, top_k: int) -> Any:
        if self.index is not None:  # a new one each time (a few µs), so it sees the index as it is now
            return self._own(self.index.as_retriever(similarity_top_k=top_k))
        with self._lock:
            if top_k not in self._by_k:
                self._by_k[top_k] = self._make_retriever(top_k)
            return self._by_k[top_k]

    def _make_retriever(self, top_k: int) -> Any:
        if hasattr(self.retriever, "similarity_top_k"):
            clone: Any = copy.copy(self.retriever)
            try:
                clone.similarity_top_k = top_k
                return self._own(clone)
            except (AttributeError, TypeError, ValueError):
                pass
        return self.retriever

    def _own(self, retriever: Any) -> Any:
        """A retriever the backend made: vectorized over a ``SimpleVectorStore``."""
        return scanning(retriever, self._scans) if self.vectorized else retriever

    def retrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        retriever = self.retriever_for(top_k)
        with _events.event(*self._start(query, top_k, retriever)) as ev:
            depth = self._quiet(retriever)
            nodes = _quiet.retrieve(retriever, query, depth) if depth else retriever.retrieve(query)
            _events.end(ev, {_events.EventPayload.NODES: nodes})
        return self._docs(nodes, top_k)

    async def aretrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        retriever = self.retriever_for(top_k)
        with _events.event(*self._start(query, top_k, retriever)) as ev:
            depth = self._quiet(retriever)
            nodes = await (_quiet.aretrieve(retriever, query, depth) if depth else retriever.aretrieve(query))
            _events.end(ev, {_events.EventPayload.NODES: nodes})
        return self._docs(nodes, top_k)

    def _quiet(self, retriever: Any) -> str | None:
        return _quiet.unobserved(retriever) if self.instrument == "observed" else None

    @staticmethod
    def _start(query: str, top_k: int, retriever: Any) -> tuple[Any, Callable[[], dict[Any, Any]], Any]:
        def payload() -> dict[Any, Any]:
            return {_events.EventPayload.QUERY_STR: query, _events.EventPayload.TOP_K: top_k}

        return _events.CBEventType.RETRIEVE, payload, getattr(retriever, "callback_manager", None)

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


def as_backend(
    obj: Any, *, vectorized: bool = True, instrument: Literal["observed", "always"] = "observed"
) -> LlamaIndexBackend:
    """A selfrag backend from a LlamaIndex ``BaseRetriever`` or an index
    (``VectorStoreIndex`` or any index with ``as_retriever``); ``vectorized`` and
    ``instrument`` as in :class:`LlamaIndexBackend`."""
    if isinstance(obj, LlamaIndexBackend):
        return obj
    if isinstance(obj, BaseRetriever):
        return LlamaIndexBackend(obj, vectorized=vectorized, instrument=instrument)
    if callable(getattr(obj, "as_retriever", None)):
        return LlamaIndexBackend(index=obj, vectorized=vectorized, instrument=instrument)
    raise TypeError(
        f"as_backend needs a LlamaIndex BaseRetriever or an index with as_retriever(), "
        f"got {type(obj).__name__}"
    )

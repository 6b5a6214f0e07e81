"""Any LangChain retriever or vector store as a selfrag retrieval backend."""

from __future__ import annotations

import sys
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, RecordManager
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr

from selfrag_core import (
    RetrievedDoc,
    ScoreKind,
    astore_search,
    chunk_id,
    content_source,
    document_parts,
    store_search,
)
from selfrag_langchain._convert import from_document, to_document

ScoreMode = Literal["relevance", "raw"]

#: what ``similarity_search_with_score`` returns, per store: (module, class, kind)
_RAW_SCORE_KINDS = (
    ("langchain_core.vectorstores.in_memory", "InMemoryVectorStore", ScoreKind.SIMILARITY),  # cosine
    ("langchain_chroma.vectorstores", "Chroma", ScoreKind.DISTANCE),  # l2, cosine and ip distances
)


def _loaded_instance(obj: Any, module: str, name: str) -> bool:
    """isinstance against a class, without importing its module (unloaded: not an instance)."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls is not None and isinstance(obj, cls)


def raw_score_kind(store: VectorStore) -> ScoreKind:
    """The meaning of ``store.similarity_search_with_score``'s scores; UNKNOWN if not known."""
    if _loaded_instance(store, "langchain_community.vectorstores.faiss", "FAISS"):
        strategy = str(getattr(store, "distance_strategy", "")).upper()
        return ScoreKind.SIMILARITY if "INNER_PRODUCT" in strategy else ScoreKind.DISTANCE
    for module, name, kind in _RAW_SCORE_KINDS:
        if _loaded_instance(store, module, name):
            return kind
    return ScoreKind.UNKNOWN


class VectorStoreSearch(BaseRetriever):
    """A vector store search returning scored documents, run as a LangChain retriever so
    it shows in tracing. ``scores="relevance"`` prefers
    ``similarity_search_with_relevance_scores`` (similarities in [0, 1]) and falls back
    to ``similarity_search_with_score`` on ``NotImplementedError`` (e.g.
    ``InMemoryVectorStore``); ``"raw"`` always uses the latter. Each document carries
    ``score`` and ``score_kind`` in its metadata; a store that implements only
    ``similarity_search`` gives its documents unscored (ranked, score unknown)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    k: int = 4
    scores: ScoreMode = "relevance"
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    #: what the store's raw scores mean, read once from its type
    _raw_kind: ScoreKind = PrivateAttr(default=ScoreKind.UNKNOWN)

    def model_post_init(self, context: Any, /) -> None:
        self._raw_kind = raw_score_kind(self.vectorstore)

    def _documents(self, found: Any, kind: ScoreKind | None) -> list[Document]:
        if kind is ScoreKind.UNKNOWN:  # unscored documents
            return list(found)
        kind = kind or self._raw_kind
        return [to_document(from_document(doc, score, kind)) for doc, score in found]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        relevance = self.scores == "relevance"
        found = store_search(self.vectorstore, query, k or self.k, relevance=relevance, **self.search_kwargs)
        return self._documents(*found)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        relevance = self.scores == "relevance"
        found = await astore_search(
            self.vectorstore, query, k or self.k, relevance=relevance, **self.search_kwargs
        )
        return self._documents(*found)


class LangChainBackend:
    """``retrieve(query, top_k)`` / ``aretrieve`` over a LangChain retriever.

    The retriever's own setting for the number of results (``k``, ``top_k`` or
    ``search_kwargs["k"]``) is set per call (on a copy); other retrievers are cut at
    ``top_k``. Scores are read from the metadata where a ``VectorStoreSearch`` put
    them; a plain retriever's documents have none (``ScoreKind.UNKNOWN``: the
    strategies then fuse by rank). Errors propagate; the strategies turn them into a
    recorded fallback.

    Over a vector store (:func:`as_backend`) it keeps selfrag's write contract
    (:class:`~selfrag_core.ingest.WritableBackend`, and passes the conformance suite):
    ``add_documents`` splits each document with ``text_splitter`` (a LangChain
    ``TextSplitter``; None: one chunk per document), stores the chunks under
    :func:`~selfrag_core.ingest.chunk_id` ids and records them per source in
    ``record_manager`` (LangChain's indexing ledger; default an in-memory one, so pass a
    ``SQLRecordManager`` for a store other processes write to), so that adding a source
    again replaces its chunks and ``delete(source)`` / ``count()`` need no store support
    beyond ``add_documents(ids=)`` and ``delete(ids)``.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        record_manager: RecordManager | None = None,
        text_splitter: Any = None,
    ) -> None:
        self.retriever = retriever
        self.vectorstore = retriever.vectorstore if isinstance(retriever, VectorStoreSearch) else None
        fields = type(retriever).model_fields
        #: the retriever's setting for the number of results, set per call (None: results cut)
        self._size_field = next((f for f in ("k", "top_k", "search_kwargs") if f in fields), None)
        if self.vectorstore is None and (record_manager is not None or text_splitter is not None):
            raise ValueError("record_manager and text_splitter apply to vector stores, not retrievers")
        self.text_splitter = text_splitter
        self.record_manager: RecordManager | None = None
        if self.vectorstore is not None:
            self.record_manager = record_manager or InMemoryRecordManager(f"selfrag/{id(self.vectorstore)}")
            self.record_manager.create_schema()

    def __repr__(self) -> str:
        return f"LangChainBackend({self.retriever.get_name()})"

    def _call(self, top_k: int) -> tuple[BaseRetriever, dict[str, Any]]:
        """The retriever to call for ``top_k`` documents, and the call's keyword arguments."""
        retriever, field = self.retriever, self._size_field
        if self.vectorstore is not None:
            return retriever, {"k": top_k}
        if field == "search_kwargs":
            search_kwargs = {**(getattr(retriever, "search_kwargs", None) or {}), "k": top_k}
            return retriever.model_copy(update={field: search_kwargs}), {}
        if field is not None:
            return retriever.model_copy(update={field: top_k}), {}
        return retriever, {}

    def retrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        retriever, kwargs = self._call(top_k)
        return [from_document(d) for d in retriever.invoke(query, **kwargs)[:top_k]]

    async def aretrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        retriever, kwargs = self._call(top_k)
        return [from_document(d) for d in (await retriever.ainvoke(query, **kwargs))[:top_k]]

    # ------------------------------------------------------------------ writing

    def _ledger(self) -> tuple[VectorStore, RecordManager]:
        if self.vectorstore is None or self.record_manager is None:
            raise TypeError("writing needs a vector store: build the backend with as_backend(vectorstore)")
        return self.vectorstore, self.record_manager

    def _pieces(self, text: str) -> list[str]:
        pieces = list(self.text_splitter.split_text(text)) if self.text_splitter is not None else [text]
        return [p for p in dict.fromkeys(pieces) if p.strip()] or [text]

    def add_documents(self, documents: Any) -> int:
        """Store the documents' chunks (all checked first); the chunks newly stored."""
        store, ledger = self._ledger()
        parts = [document_parts(doc) for doc in documents]
        added = 0
        for text, source, metadata in parts:
            source = source if source is not None else content_source(text, metadata)
            pieces = self._pieces(text)
            ids = [chunk_id(source, piece) for piece in pieces]
            old = set(ledger.list_keys(group_ids=[source]))
            meta = {**metadata, "source": source}
            new = [
                Document(page_content=piece, id=key, metadata={**meta, "chunk_index": n})
                for n, (piece, key) in enumerate(zip(pieces, ids, strict=True))
                if key not in old
            ]
            if new:
                store.add_documents(new, ids=[str(d.id) for d in new])
                ledger.update([str(d.id) for d in new], group_ids=[source] * len(new))
            stale = sorted(old - set(ids))
            if stale:
                store.delete(ids=stale)
                ledger.delete_keys(stale)
            added += len(new)
        return added

    def delete(self, source: str) -> int:
        """Remove every chunk of ``source``; how many went."""
        store, ledger = self._ledger()
        keys = ledger.list_keys(group_ids=[source])
        if keys:
            store.delete(ids=keys)
            ledger.delete_keys(keys)
        return len(keys)

    def count(self) -> int:
        """The chunks written through this backend's ledger."""
        return len(self._ledger()[1].list_keys())


def as_backend(
    obj: Any,
    *,
    scores: ScoreMode = "relevance",
    record_manager: RecordManager | None = None,
    text_splitter: Any = None,
    **search_kwargs: Any,
) -> LangChainBackend:
    """A selfrag backend from a LangChain ``BaseRetriever`` or ``VectorStore``.

    ``scores`` and ``search_kwargs`` (e.g. ``filter=...``) apply to vector stores, and so
    do ``record_manager`` and ``text_splitter``, which writing uses (see
    :class:`LangChainBackend`). Raises ``TypeError`` for anything else (selfrag's own
    backends need no adapter).
    """
    if isinstance(obj, LangChainBackend):
        return obj
    if isinstance(obj, VectorStore):
        return LangChainBackend(
            VectorStoreSearch(vectorstore=obj, scores=scores, search_kwargs=search_kwargs),
            record_manager=record_manager, text_splitter=text_splitter,
        )  # fmt: skip
    if isinstance(obj, BaseRetriever):
        if search_kwargs:
            raise ValueError("search_kwargs apply to vector stores; configure the retriever itself")
        return LangChainBackend(obj, record_manager=record_manager, text_splitter=text_splitter)
    raise TypeError(
        f"as_backend expects a LangChain BaseRetriever or VectorStore, got {type(obj).__name__}; "
        "objects with retrieve(query, top_k) are backends already"
    )

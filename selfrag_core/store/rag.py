"""``RAG``: the embedded default backend, one object over its parts.

* :mod:`~selfrag_core.store.index`: the chunks, vectors and BM25 statistics;
* :mod:`~selfrag_core.store.search`: lexical, dense and hybrid search (scoring is
  described there), filters, query expansion, reranking;
* :mod:`~selfrag_core.store.persist`: saving and loading an index directory;
* :mod:`~selfrag_core.store.config`: the settings of a TOML file;
* :mod:`~selfrag_core.store.answer`: the result of :meth:`RAG.query`, which is
  ``PlainRAG`` run by the library's engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from selfrag_core.config import ExecutionConfig, PlainRAGConfig
from selfrag_core.errors import ConfigurationError
from selfrag_core.runner import arun_query, run_query
from selfrag_core.store.answer import QueryResult, Usage, format_hits, query_result
from selfrag_core.store.chunking import Chunker, TextChunk
from selfrag_core.store.config import CONFIG_KEYS, is_weight, read_config
from selfrag_core.store.dense import resolve_embedder
from selfrag_core.store.index import Index, PreparedDocument, Preparer, check_metadata, check_text
from selfrag_core.store.lexical import Tokenizer
from selfrag_core.store.persist import (
    LOCK_FILE,
    MANIFEST,
    EmbedderMismatchError,
    IndexConflictError,
    IndexFormatError,
    StoredIndex,
    committed,
    embedder_from_identity,
    generation,
    index_lock,
    load_index,
    manifest_version,
    save_index,
)
from selfrag_core.store.rerank import Reranker, make_reranker
from selfrag_core.store.search import SearchHit, query_list, search_many
from selfrag_core.strategies.plain import PlainRAG
from selfrag_core.types import RetrievedDoc
from selfrag_core.validation import check_int, validate_query

__all__ = ["RAG", "QueryResult", "SearchHit", "Usage", "format_hits"]

logger = logging.getLogger("selfrag")

#: async searches run on the event loop while the last search cost less CPU than this (s):
#: a thread hop costs more than a small search, and 200 of them at once contend for the GIL
INLINE_SEARCH_S = 0.001
#: how :meth:`RAG.query` runs without ``execution=``: no timeouts unless asked for
#: (``generate_timeout``), no LLM-call budget
QUERY_EXECUTION = ExecutionConfig(llm_timeout=None, retrieval_timeout=None)


class RAG:
    """Index documents and retrieve or answer over them, offline, with any embedder.

    ``embed``: an embedder (``embed_documents`` / ``embed_query``), ``"hashing"`` for
    :class:`HashingEmbeddings`, or ``None`` for lexical-only search.
    ``path``: an index directory; loaded at construction when it holds an index, and
    the default target of :meth:`save`.
    ``bm25_alpha``: weight of dense scores against BM25 (see :mod:`~selfrag_core.store.search`).
    ``bm25_autorebuild``: rebuild BM25 statistics lazily at the next search after
    changes (default); when False, only :meth:`rebuild_bm25_from_store` does, and
    lexical search sees the chunks of the last rebuild.
    ``reranker``: None, ``"noop"``, ``"diversity"`` (MMR), a reranker object
    (``rerank(query, hits, top_k, vectors)``) or a cross-encoder scorer
    (``score(query, texts)``, ``predict(pairs)`` or ``f(query, texts)``).
    ``query_expander``: ``f(query) -> list[str]``; rankings of all queries are fused.
    ``generate_fn``: the default LLM of :meth:`query` (anything ``selfrag_core.llm`` calls).
    ``stemmer``: ``"auto"`` (PyStemmer if installed), ``"pystemmer"`` or ``None``.
    ``execution``: the ``ExecutionConfig`` :meth:`query` runs under (LLM-call budget,
    query and LLM timeouts); default :data:`QUERY_EXECUTION`, no limits.

    A ``RAG`` is a retrieval backend for every strategy (``retrieve``/``aretrieve``,
    ``add_document``) and a writable one (:class:`~selfrag_core.ingest.WritableBackend`:
    ``add_documents``, ``delete``, ``count``, ``sources``, ``save`` and their async twins).
    Sync methods never touch an event loop; async ones run the CPU work in a thread.
    """

    score_kind = "similarity"

    def __init__(
        self,
        embed: Any = None,
        *,
        path: str | os.PathLike[str] | None = None,
        chunker: str = "recursive",
        chunk_size: int = 1000,
        chunk_overlap: int = 200,
        bm25_alpha: float | None = None,
        bm25_autorebuild: bool = True,
        reranker: Any = None,
        query_expander: Callable[[str], list[str]] | None = None,
        generate_fn: Any = None,
        stemmer: str | None = "auto",
        llm_retries: int = 2,
        execution: ExecutionConfig | None = None,
    ) -> None:
        self.embedder = resolve_embedder(embed)
        self.chunker = Chunker(chunker, chunk_size, chunk_overlap)
        if bm25_alpha is None:
            bm25_alpha = 0.5 if self.embedder is not None else 0.0
        if not is_weight(bm25_alpha):
            raise ConfigurationError(f"bm25_alpha must be a number in [0, 1] or None, got {bm25_alpha!r}")
        if bm25_alpha > 0 and self.embedder is None:
            raise ConfigurationError(
                f"bm25_alpha={bm25_alpha} weights dense search, but no embedder was given: pass embed=..."
            )
        if query_expander is not None and not callable(query_expander):
            raise TypeError("query_expander must be a callable f(query) -> list[str]")
        if execution is not None and not isinstance(execution, ExecutionConfig):
            raise TypeError("execution must be an ExecutionConfig")
        check_int("llm_retries", llm_retries, 0)
        self.bm25_alpha = float(bm25_alpha)
        self.reranker: Reranker | None = make_reranker(reranker)
        self._reranker_spec = reranker if isinstance(reranker, str) else None
        self.query_expander = query_expander
        self.generate_fn = generate_fn
        self.stemmer = stemmer
        self.llm_retries = llm_retries
        self.execution = execution if execution is not None else QUERY_EXECUTION
        self.path = Path(path) if path is not None else None

        tokenizer = Tokenizer(stemmer) if self.bm25_alpha < 1 else None
        self._index = Index(self.embedder, self.chunker, tokenizer, autorebuild=bool(bm25_autorebuild))
        self._search_cpu_s: float | None = None  # the last search's CPU time per query; None before any
        # the index at ``path`` as last loaded or saved: its manifest's version, its generation
        self._disk_version: tuple[int, int, int] | None = None
        self._generation: tuple[Any, Any] | None = None
        if self.embedder is None:
            logger.info("selfrag store: no embedder given, so search is lexical (BM25) only")
        if self.path is not None:
            if (self.path / MANIFEST).exists():
                stored = load_index(self.path)
                self._index.restore(stored)
                self._synced(stored)
            elif self.path.is_dir() and any(p.name != LOCK_FILE for p in self.path.iterdir()):
                raise IndexFormatError(
                    f"{self.path} is a non-empty directory without a selfrag index; "
                    "choose a new or empty directory"
                )

    def __repr__(self) -> str:
        mode = "lexical" if self.bm25_alpha == 0 else "dense" if self.bm25_alpha == 1 else "hybrid"
        return f"RAG(chunks={self.count()}, sources={len(self._index.sources)}, mode={mode})"

    @property
    def bm25_autorebuild(self) -> bool:
        return self._index.autorebuild

    @bm25_autorebuild.setter
    def bm25_autorebuild(self, value: bool) -> None:
        self._index.autorebuild = bool(value)

    # ------------------------------------------------------------------ configuration

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **overrides: Any) -> RAG:
        """Build a RAG from a TOML file (keys at top level or under ``[rag]``).

        Keys: embed ("hashing"), path, chunker, chunk_size, chunk_overlap, bm25_alpha,
        bm25_autorebuild, reranker ("noop" / "diversity"), stemmer, llm_retries. A
        relative ``path`` is relative to the file. ``overrides`` win over the file.
        """
        settings = {**read_config(Path(path)), **overrides}
        embed = settings.pop("embed", None)
        return cls(embed, **settings)

    def set_generate_fn(self, generate_fn: Any) -> None:
        """Set or replace the default LLM of :meth:`query`."""
        self.generate_fn = generate_fn

    # ------------------------------------------------------------------ indexing

    def chunk(self, text: str, **metadata: Any) -> list[TextChunk]:
        """Split ``text`` with this RAG's chunker, without indexing."""
        return self.chunker.chunk(check_text(text), **check_metadata(metadata))

    def index(
        self, text: str, source: str | None = None, checksum: str | None = None, **metadata: Any
    ) -> int:
        """Index one document; returns the number of chunks created (0 when unchanged).

        A ``source`` already indexed with the same checksum (given, or computed from
        the text, metadata and chunker settings) is skipped; with another checksum
        its chunks are replaced. Without a source, the document gets a generated,
        content-derived one (``doc-<hash>``), so it never replaces another document.
        """
        item = self._index.prepare(text, source, checksum, metadata)
        return 0 if item is None else self._index.add([item])

    def index_many(
        self, documents: Iterable[Mapping[str, Any]], *, progress: Callable[[int], Any] | None = None
    ) -> int:
        """Index several documents in one batch (one embedding pass, one BM25 rebuild).

        Each item is a dict with ``text`` and optionally ``source``, ``checksum``,
        ``metadata`` (a dict) and further metadata keys. Every document is checked
        first: one bad document raises and nothing of the batch is indexed.
        ``progress(n)`` hears of the chunks as each embedder call ends (see :meth:`add_prepared`).
        """
        return self._index.add(self._index.prepare_many(documents), progress=progress)

    def prepare_many(self, documents: Iterable[Mapping[str, Any]]) -> list[PreparedDocument]:
        """The documents of :meth:`index_many` checked, chunked and tokenised, not yet
        indexed (those indexed with the same checksum already left out): what
        :meth:`add_prepared` adds. ``selfrag index`` prepares each file as it reads it, so
        that it knows how many chunks it will embed before the first is."""
        return self._index.prepare_many(documents)

    async def aindex(
        self, text: str, source: str | None = None, checksum: str | None = None, **metadata: Any
    ) -> int:
        """Async :meth:`index` (the work runs in a thread)."""
        return await asyncio.to_thread(self.index, text, source, checksum, **metadata)

    async def aindex_many(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """Async :meth:`index_many` (the work runs in a thread)."""
        return await asyncio.to_thread(self.index_many, list(documents))

    def add_documents(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """The write contract's add (:class:`~selfrag_core.ingest.WritableBackend`): :meth:`index_many`."""
        return self.index_many(documents)

    async def aadd_documents(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """Async :meth:`add_documents` (the work runs in a thread)."""
        return await self.aindex_many(documents)

    def add_document(self, text: str, metadata: Mapping[str, Any] | None = None) -> int:
        """The strategies' ``add_document``: ``metadata['source']`` and ``['checksum']`` are honoured."""
        meta = dict(metadata or {})
        return self.index(text, source=meta.pop("source", None), checksum=meta.pop("checksum", None), **meta)

    def delete(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many were removed."""
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        return self._index.delete(source)

    async def adelete(self, source: str) -> int:
        """Async :meth:`delete` (the work runs in a thread)."""
        return await asyncio.to_thread(self.delete, source)

    def preparer(self) -> Preparer:
        """What prepares documents as this index does, in another process (a
        :class:`~selfrag_core.store.index.Preparer`): the chunks a worker makes and the
        vectors it embeds are :meth:`add_prepared` here."""
        with self._index.lock:
            checksums = dict(self._index.sources)
        tokenized = self._index.tokenizer is not None
        return Preparer(self.chunker.settings(), self.stemmer, tokenized, checksums)

    def add_prepared(
        self,
        docs: list[PreparedDocument],
        vectors: Any = None,
        *,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Add documents prepared elsewhere (:meth:`preparer`) or by :meth:`prepare_many`
        with their chunks' vectors (in order; None: embedded here, with the index's
        embedder if it has one), replacing the chunks of a source indexed before: the chunk
        ids (``source#n``) make a batch added twice the same. ``progress(n)`` is told of the
        chunks as they are embedded, after each embedder call (of a few of its batches;
        all of them at the end when nothing is embedded here). Returns the chunks added;
        :meth:`save` makes it durable (under the writers' lock)."""
        if vectors is not None:
            self._index.check_dim(int(vectors.shape[1]))
        return self._index.add(docs, vectors, progress)

    def count(self) -> int:
        """Number of indexed chunks."""
        return len(self._index.chunks)

    def __len__(self) -> int:
        return self.count()

    def sources(self) -> dict[str, str]:
        """Indexed sources and their checksums."""
        with self._index.lock:
            return dict(self._index.sources)

    def texts_of(self, source: str) -> list[str]:
        """The texts of the chunks of ``source``, in order (empty when it is not indexed)."""
        with self._index.lock:
            chunks = self._index.chunks
            others = set(chunks.positions_without({source}).tolist())
            return [chunks[i].text for i in range(len(chunks)) if i not in others]

    @property
    def bm25_rebuilds(self) -> int:
        """How many times the BM25 statistics were rebuilt (for tests and diagnostics)."""
        return self._index.rebuilds

    def rebuild_bm25_from_store(self) -> int:
        """Re-tokenise every stored chunk and rebuild BM25 now; returns the number of chunks."""
        if self._index.tokenizer is None:
            raise ConfigurationError("BM25 is disabled (bm25_alpha=1): there is no lexical index to rebuild")
        return self._index.rebuild_lexical(retokenize=True)

    def upgrade_bm25(self) -> bool:
        """Re-tokenise every chunk and rebuild BM25 when the index was saved by an older
        selfrag, whose terms hold no identifiers ("PEP 572" as "pep572") nor file names
        (see :mod:`~selfrag_core.store.lexical`); whether it did (:meth:`save` keeps it).
        ``selfrag index`` does it; until then such an index is searched as it was."""
        index = self._index
        if index.tokenizer is None or index.lexical_terms == index.tokenizer.identity:
            return False
        index.rebuild_lexical(retokenize=True)
        return True

    # ------------------------------------------------------------------ search

    def search(
        self, query: str, top_k: int = 5, *, metadata_filter: Any = None, **filters: Any
    ) -> list[SearchHit]:
        """Best chunks for ``query``; ``filters`` match metadata exactly (a list means
        "any of", a callable is a predicate on the value); ``metadata_filter`` is a dict
        of the same or a predicate on the whole metadata dict."""
        return self.search_many([query], top_k, metadata_filter=metadata_filter, **filters)[0]

    def search_many(
        self, queries: Sequence[str], top_k: int = 5, *, metadata_filter: Any = None, **filters: Any
    ) -> list[list[SearchHit]]:
        """:meth:`search` for each of ``queries`` (same filters), in one pass: one
        embedder call for all the query vectors where the embedder has ``embed_queries``,
        one matrix product for their dense scores. HyDE searches its question and its
        passages this way."""
        return search_many(
            self._index, queries, top_k,
            alpha=self.bm25_alpha, reranker=self.reranker, expander=self.query_expander,
            metadata_filter=metadata_filter, filters=filters,
        )  # fmt: skip

    async def asearch(
        self, query: str, top_k: int = 5, *, metadata_filter: Any = None, **filters: Any
    ) -> list[SearchHit]:
        """Async :meth:`search` (on the event loop or a thread, as :meth:`asearch_many`)."""
        return (await self.asearch_many([query], top_k, metadata_filter=metadata_filter, **filters))[0]

    async def asearch_many(
        self, queries: Sequence[str], top_k: int = 5, *, metadata_filter: Any = None, **filters: Any
    ) -> list[list[SearchHit]]:
        """Async :meth:`search_many`: in a worker thread, or on the event loop while the
        last search took less than ``INLINE_SEARCH_S`` of CPU for as many queries
        (measured on every call: a slow embedder or a grown index goes back to threads)."""
        queries = query_list(queries)
        cost = self._search_cpu_s
        if cost is not None and cost * len(queries) < INLINE_SEARCH_S:
            return self._timed_search(queries, top_k, metadata_filter, filters)
        return await asyncio.to_thread(self._timed_search, queries, top_k, metadata_filter, filters)

    def _timed_search(
        self, queries: Sequence[str], top_k: int, metadata_filter: Any, filters: Mapping[str, Any]
    ) -> list[list[SearchHit]]:
        start = time.thread_time()  # this thread's CPU: waiting for the GIL does not count
        try:
            return self.search_many(queries, top_k, metadata_filter=metadata_filter, **filters)
        finally:
            self._search_cpu_s = (time.thread_time() - start) / max(1, len(queries))

    def retrieve(
        self,
        query: str,
        top_k: int = 5,
        metadata_filter: Any = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[RetrievedDoc]:
        """The strategies' backend call: :meth:`search` as ``RetrievedDoc`` (similarity scores)."""
        return list(self.search(query, top_k, metadata_filter=metadata_filter, **dict(filters or {})))

    async def aretrieve(
        self,
        query: str,
        top_k: int = 5,
        metadata_filter: Any = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[RetrievedDoc]:
        """Async :meth:`retrieve` (on the event loop or a thread, as :meth:`asearch`)."""
        return list(await self.asearch(query, top_k, metadata_filter=metadata_filter, **dict(filters or {})))

    def retrieve_many(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        metadata_filter: Any = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[list[RetrievedDoc]]:
        """The strategies' batch call (HyDE's question and passages): :meth:`search_many`
        as ``RetrievedDoc`` lists, one per query."""
        found = self.search_many(queries, top_k, metadata_filter=metadata_filter, **dict(filters or {}))
        return [list(hits) for hits in found]

    async def aretrieve_many(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        metadata_filter: Any = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[list[RetrievedDoc]]:
        """Async :meth:`retrieve_many` (on the event loop or a thread, as :meth:`asearch_many`)."""
        options = dict(filters or {})
        found = await self.asearch_many(queries, top_k, metadata_filter=metadata_filter, **options)
        return [list(hits) for hits in found]

    # ------------------------------------------------------------------ answering

    def query(
        self,
        question: str,
        generate_fn: Any = None,
        top_k: int = 5,
        prompt_template: str | None = None,
        max_context_chars: int | None = None,
        allow_llm_on_empty: bool = True,
        generate_timeout: float | None = None,
        **filters: Any,
    ) -> QueryResult:
        """Retrieve, fill the prompt (``{context}``, ``{question}``), ask the LLM.

        The query is :class:`~selfrag_core.strategies.plain.PlainRAG` over this RAG
        (its ``grounded_answer`` prompt, or ``prompt_template``), run on the engine under
        ``execution``, returning the reply as the model wrote it: the result's ``trace``
        holds the search and the LLM call. ``filters`` (and ``metadata_filter``) go to
        :meth:`search`. ``generate_timeout`` bounds each LLM attempt (``LLMTimeoutError``
        past it); with ``allow_llm_on_empty=False`` and no hits, the LLM is not called
        and the answer is empty (``llm_called`` is False). A failed search raises
        ``RetrievalError`` (``ConfigurationError`` for a programming error, such as a
        bad filter), a failed LLM call ``LLMCallError``; the original error is the
        ``__cause__``. Safe inside a running event loop.
        """
        strategy, question, context = self._answering(
            question, generate_fn, top_k, prompt_template, max_context_chars,
            allow_llm_on_empty, generate_timeout, filters,
        )  # fmt: skip
        return query_result(strategy, question, run_query(strategy, question, context))

    async def aquery(
        self,
        question: str,
        generate_fn: Any = None,
        top_k: int = 5,
        prompt_template: str | None = None,
        max_context_chars: int | None = None,
        allow_llm_on_empty: bool = True,
        generate_timeout: float | None = None,
        **filters: Any,
    ) -> QueryResult:
        """Async :meth:`query`: the LLM's native async API is used where it has one."""
        strategy, question, context = self._answering(
            question, generate_fn, top_k, prompt_template, max_context_chars,
            allow_llm_on_empty, generate_timeout, filters,
        )  # fmt: skip
        return query_result(strategy, question, await arun_query(strategy, question, context))

    def _answering(
        self,
        question: str,
        generate_fn: Any,
        top_k: int,
        prompt_template: str | None,
        max_context_chars: int | None,
        allow_llm_on_empty: bool,
        generate_timeout: float | None,
        filters: dict[str, Any],
    ) -> tuple[PlainRAG, str, dict[str, Any]]:
        """The PlainRAG of one :meth:`query`, the question checked, and the query's
        context (the search's filters)."""
        question = validate_query(question, name="question")
        llm = generate_fn if generate_fn is not None else self.generate_fn
        if llm is None:
            raise ConfigurationError(
                "no LLM to answer with: pass generate_fn=... to query() or RAG(generate_fn=...)"
            )
        execution = self.execution
        if generate_timeout is not None:
            execution = dataclasses.replace(execution, llm_timeout=generate_timeout)
        config = PlainRAGConfig(
            top_k=top_k, llm_retries=self.llm_retries, max_context_chars=max_context_chars,
            allow_llm_on_empty=allow_llm_on_empty, check_answer=False, raise_errors=True,
        )  # fmt: skip
        prompts = None if prompt_template is None else {"grounded_answer": prompt_template}
        try:
            strategy = PlainRAG(self, llm, config, execution=execution, prompts=prompts)
        except ConfigurationError as e:  # the template's check (the config is checked above)
            raise ConfigurationError(f"prompt_template: {e}") from e
        metadata_filter = filters.pop("metadata_filter", None)
        context = {"filters": filters, "metadata_filter": metadata_filter}
        return strategy, question, context

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the index to ``path`` (default: the ``path`` given at construction), atomically,
        with its vectors and BM25 statistics (rebuilt first when changes are pending and
        ``bm25_autorebuild`` is on), so that opening it rebuilds nothing.

        The save holds the directory's writer lock throughout, so writers of one directory
        (``selfrag index`` beside ``selfrag serve``) take turns. When another writer saved at
        ``path`` since this RAG loaded or saved it, its index is loaded and this RAG's changes
        since are applied over it: documents added or replaced here replace theirs, sources
        deleted here are deleted, everything else of theirs stays (and this RAG then holds
        the merged index). :class:`IndexConflictError` when theirs was rebuilt with another
        embedder: nothing is saved. Another ``path`` (a first save, a copy) is replaced."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("no path to save to: pass save(path) or RAG(path=...)")
        settings: dict[str, Any] = {
            "bm25_alpha": self.bm25_alpha,
            "bm25_autorebuild": self.bm25_autorebuild,
            "stemmer": self.stemmer,
            **self.chunker.settings(),
        }
        if self._reranker_spec is not None:
            settings["reranker"] = self._reranker_spec
        index = self._index
        tokenizer = index.tokenizer
        home = self.path is not None and target.resolve() == self.path.resolve()
        with index_lock(target), index.lock:
            on_disk = home and self._catch_up(target)
            manifest = {
                "embedder": index.identity(),
                "tokenizer": None if tokenizer is None else index.lexical_terms,
                "settings": settings,
            }
            # a delta over the base this index was restored from, when that is what is on disk
            stored = index.stored
            base = None
            if on_disk and stored is not None:
                same = all(stored.manifest.get(key) == value for key, value in manifest.items())
                base = stored.manifest if same else None
            snapshot = index.snapshot(delta_of=base)
            written = save_index(target, settings=manifest, **snapshot)
            if self.path is None:
                self.path, home = target, True
            if home:
                if "delta" in snapshot:
                    index.touched.clear()
                    self._disk_version, self._generation = manifest_version(target), generation(written)
                else:  # the next save writes a delta over this one
                    saved = load_index(target)
                    index.restore(saved)
                    self._synced(saved)
        return target

    def _catch_up(self, target: Path) -> bool:
        """Under the directory's lock: when another writer saved at ``target`` since this
        RAG loaded or saved it, merge its index and this one's changes since (see
        :meth:`save`). Returns whether ``target`` holds the index this RAG stands on."""
        now = committed(target)
        if now is None or now == self._generation:
            return now is not None
        stored = load_index(target, reuse=self._index.stored)
        try:
            self._index.merge(stored)
        except EmbedderMismatchError as e:
            raise IndexConflictError(
                f"another writer saved {target} with another embedder since this RAG loaded it ({e}); "
                f"nothing was saved. Load it again with RAG.load({str(target)!r}) and index these "
                "documents into it, or save this index to another directory with save(path)"
            ) from e
        self._synced(stored)
        logger.info("selfrag store: %s was saved by another writer: this RAG's changes went over it", target)
        return True

    def _synced(self, stored: StoredIndex) -> None:
        """Record that ``stored`` is the index at ``path`` as this RAG last loaded it."""
        self._disk_version, self._generation = stored.version, generation(stored.manifest)

    def changed_on_disk(self) -> bool:
        """Whether another process (a second ``selfrag serve`` worker, ``selfrag index``)
        saved the index at ``path`` since this object last loaded or saved it. One
        ``stat`` call: cheap enough to ask before every query."""
        return self.path is not None and manifest_version(self.path) not in (None, self._disk_version)

    def refresh(self) -> bool:
        """Reload the index from ``path`` if it :meth:`changed_on_disk`; returns whether it
        did. Changes not saved yet are kept (applied over it, as :meth:`save` does).
        Concurrent searches see either the old or the new index, never a mix."""
        while self.changed_on_disk():
            assert self.path is not None
            # what another process saved: only its delta when the base is the one loaded here
            stored = load_index(self.path, reuse=self._index.stored)
            with self._index.lock:  # a save of this RAG commits under it
                if manifest_version(self.path) != stored.version:
                    continue  # saved again while it was read (by this RAG, maybe): read that
                self._index.merge(stored)  # swapped under the lock
                self._synced(stored)
            logger.info("selfrag store: reloaded %s (saved by another process)", self.path)
            return True
        return False

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], embed: Any = None, *, verify: bool = False, **overrides: Any
    ) -> RAG:
        """Open a saved index. Its saved settings apply unless overridden; ``embed`` must be
        the embedder it was built with (the built-in hashing embedder is recreated). The
        chunks' columns, the vectors and the BM25 arrays are memory-mapped, not rebuilt, and a
        chunk is decoded only when a search returns it (an index saved by an older selfrag, or
        with another ``stemmer``, has its BM25 statistics rebuilt at the first search).
        Every file's structure is checked, and its checksum up to 64 MiB; ``verify=True``
        checks the checksums of the large files too."""
        stored = load_index(path, verify=verify)  # the manifest is validated: settings and embedder typed
        settings = {k: v for k, v in stored.manifest["settings"].items() if k in CONFIG_KEYS}
        settings.update(overrides)
        identity = stored.manifest["embedder"]
        if embed is None and identity is not None:
            embed = _recorded_embedder(identity)
        rag = cls(embed, **settings)
        rag._index.restore(stored)
        rag.path = Path(path)
        rag._synced(stored)
        return rag


#: the entry point group of embedders an index may record, each a class (or factory) whose
#: ``name`` is the name it records and that takes no arguments (the local MiniLM registers)
EMBEDDER_GROUP = "selfrag.embedders"


def _recorded_embedder(identity: Mapping[str, Any]) -> Any:
    """The embedder an index records, opened: the built-in hashing one, or one registered
    in the ``selfrag.embedders`` entry point group under the name it records (the local
    MiniLM that ``selfrag index`` builds with); else EmbedderMismatchError saying what
    to pass."""
    from importlib import metadata

    from selfrag_core.errors import MissingDependencyError

    name = str(identity.get("name", ""))
    registered = {}
    for entry in metadata.entry_points(group=EMBEDDER_GROUP):
        try:
            factory = entry.load()  # an embedder's module, which loads no model
        except ImportError:
            continue
        registered[str(getattr(factory, "name", entry.name))] = (entry, factory)
    if name in registered:
        entry, factory = registered[name]
        try:
            return factory()
        except MissingDependencyError as e:
            raise EmbedderMismatchError(
                f"this index was built with the embedder {name!r} ({entry.value}), which cannot be "
                f"opened: {e}; then RAG.load opens it, or pass it: RAG.load(path, embed=...)"
            ) from e
    try:
        return embedder_from_identity(identity)
    except EmbedderMismatchError as e:
        known = ", ".join(f"{n} ({entry.value})" for n, (entry, _) in registered.items()) or "none"
        raise EmbedderMismatchError(
            f"this index was built with the embedder {name!r} (dim {identity.get('dim')}), which selfrag "
            "cannot open by itself; pass that embedder: RAG.load(path, embed=YourEmbeddings()), an "
            "object with embed_documents and embed_query giving the same vectors (same name and "
            f"dimension); embedders selfrag opens by name: the built-in hashing one, {known}"
        ) from e

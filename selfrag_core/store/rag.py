"""``RAG``: the embedded default backend (chunking, lexical, dense, hybrid, persistence).

Scoring (all scores are similarities, higher is better):

* lexical only (no embedder, or ``bm25_alpha=0``): the BM25 score from ``bm25s``;
  chunks sharing no term with the query are not returned;
* dense only (``bm25_alpha=1``): cosine similarity of unit vectors;
* hybrid: ``alpha * dense' + (1 - alpha) * bm25'`` where ``'`` is min-max
  normalisation over the searchable chunks (a convex combination of normalised
  scores; Bruch et al., 2023, found it at least as good as rank fusion);
* with a ``query_expander``: the rankings of the original and expanded queries are
  fused with reciprocal rank fusion (score ``sum 1 / (60 + rank)``).

``bm25_alpha`` is the weight of the dense component, as in the reference API;
``None`` (the default) means 0.5 with an embedder and lexical-only without one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.llm import LLMReply, acall_llm_detailed, call_llm_detailed
from selfrag_core.prompts import Prompts, PromptTemplate, detect_language, document_block
from selfrag_core.store.chunking import Chunker, TextChunk
from selfrag_core.store.dense import HashingEmbeddings, as_matrix, embedder_name
from selfrag_core.store.lexical import LexicalIndex, Tokenizer
from selfrag_core.store.persist import (
    MANIFEST,
    EmbedderMismatchError,
    IndexFormatError,
    StoredIndex,
    load_index,
    save_index,
)
from selfrag_core.store.rerank import Reranker, make_reranker
from selfrag_core.types import RetrievedDoc, ScoreKind, _json_safe
from selfrag_core.validation import check_int, validate_query

logger = logging.getLogger("selfrag")

_RRF_K = 60
_EMBED_BATCH = 256
#: async searches run on the event loop while the last search cost less CPU than this (s):
#: a thread hop costs more than a small search, and 200 of them at once contend for the GIL
INLINE_SEARCH_S = 0.001
_SCALARS = (str, int, float, bool, type(None))
_CONFIG_KEYS = (
    "embed", "path", "chunker", "chunk_size", "chunk_overlap", "bm25_alpha", "bm25_autorebuild",
    "reranker", "stemmer", "llm_retries",
)  # fmt: skip


# ----------------------------------------------------------------------------- results


@dataclass
class SearchHit(RetrievedDoc):
    """A retrieved chunk: a ``RetrievedDoc`` plus its source and the component scores."""

    source: str = ""
    lexical_score: float | None = None
    dense_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update(source=self.source, lexical_score=self.lexical_score, dense_score=self.dense_score)
        return out


@dataclass
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "attempts": self.attempts,
        }


@dataclass
class QueryResult:
    """The answer of :meth:`RAG.query` with what it was built from."""

    answer: str
    hits: list[SearchHit] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    prompt: str = ""
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0
    llm_called: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "hits": [h.to_dict() for h in self.hits],
            "sources": list(self.sources),
            "prompt": self.prompt,
            "usage": self.usage.to_dict(),
            "duration": round(self.duration, 6),
            "llm_called": self.llm_called,
        }


@dataclass
class _Chunk:
    id: str
    text: str
    source: str
    metadata: dict[str, Any]
    tokens: list[str]


@dataclass
class _Document:
    source: str
    checksum: str
    chunks: list[_Chunk]


# ----------------------------------------------------------------------------- validation


def _check_text(text: Any) -> str:
    if isinstance(text, (bytes, bytearray)):
        raise TypeError("text is bytes: decode it first (e.g. data.decode('utf-8'))")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: there is nothing to index")
    sample = text[:100_000]
    odd = sum(1 for ch in sample if (ch < " " and ch not in "\t\n\r\f\v") or ch == "\ufffd")
    if "\x00" in sample or odd > 0.05 * len(sample):
        raise ValueError(
            "text looks like binary data (NUL, control or undecodable characters); index text files only"
        )
    return text


def _check_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"metadata keys must be strings, got {key!r}")
        if not isinstance(value, _SCALARS):
            raise TypeError(
                f"metadata value for {key!r} must be a str, int, float, bool or None "
                f"(got {type(value).__name__}); it is stored as JSON"
            )
    return dict(metadata)


def _check_source(source: Any) -> str | None:
    if source is None:
        return None
    if not isinstance(source, str) or not source.strip():
        raise TypeError(f"source must be a non-empty str or None, got {source!r}")
    return source


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def _matches(value: Any, condition: Any) -> bool:
    if callable(condition):
        return bool(condition(value))
    if isinstance(condition, (list, tuple, set, frozenset)):
        return value in condition
    return bool(value == condition)


def _manifest_version(root: Path) -> tuple[int, int, int] | None:
    """What changes when an index is saved (the manifest is replaced atomically), or None."""
    try:
        st = os.stat(root / MANIFEST)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _query_list(queries: Sequence[str]) -> Sequence[str]:
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise TypeError(
            f"search_many takes a list of queries, got {type(queries).__name__}; use search() for one"
        )
    return queries


def _minmax(scores: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Scores scaled to [0, 1] over the ``valid`` positions (all when None)."""
    kept = scores if valid is None else scores[valid]
    if kept.size == 0:
        return np.zeros_like(scores)
    low, high = float(kept.min()), float(kept.max())
    if high <= low:  # one value for all: keep only "has some signal"
        return (scores > 0).astype(scores.dtype)
    return (scores - low) / (high - low)


def format_hits(hits: list[SearchHit], max_chars: int | None = None) -> str:
    """The context block of a prompt: each hit fenced with its source and relevance
    (:func:`~selfrag_core.prompts.document_block`), within ``max_chars`` characters: the
    hits that fit whole, then as much of the next one's text as fits in its block."""
    blocks: list[str] = []
    used = 0
    for i, h in enumerate(hits, 1):
        note = f'relevance="{h.score if h.score is not None else 0.0:.3f}"'
        block = document_block(i, h.text, h.source, note)
        room = None if max_chars is None else max_chars - used - (1 if blocks else 0)
        if room is not None and len(block) > room:
            cut = document_block(i, h.text.strip()[: max(room - len(block) + len(h.text), 0)], h.source, note)
            if len(cut) <= room and len(cut) > len(document_block(i, "", h.source, note)):
                blocks.append(cut)  # as much of the text as fits in its block
            break
        blocks.append(block)
        used += len(block) + (1 if len(blocks) > 1 else 0)
    return "\n".join(blocks)


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ImportError as e:
            raise MissingDependencyError("reading TOML on Python 3.10 needs tomli: pip install tomli") from e
    with path.open("rb") as f:
        data: dict[str, Any] = tomllib.load(f)
    return data


def _resolve_embedder(embed: Any) -> Any:
    if embed is None:
        return None
    if isinstance(embed, str):
        if embed == "hashing":
            return HashingEmbeddings()
        raise ConfigurationError(
            f"unknown embedder name {embed!r}: use 'hashing' or pass an object with "
            "embed_documents(texts) and embed_query(text)"
        )
    if not (
        callable(getattr(embed, "embed_documents", None)) and callable(getattr(embed, "embed_query", None))
    ):
        raise TypeError(
            f"{type(embed).__name__} is not an embedder: it needs embed_documents and embed_query"
        )
    return embed


def _embedder_from_identity(identity: Mapping[str, Any]) -> Any:
    name = str(identity.get("name", ""))
    if name.startswith("selfrag-hashing-v1-"):
        dim, grams = name.rsplit("-", 2)[1:]
        if dim.isdigit() and len(grams) == 2 and grams.isdigit():
            try:
                return HashingEmbeddings(int(dim), (int(grams[0]), int(grams[1])))
            except ValueError as e:  # "selfrag-hashing-v1-0-43": not a name the class gives
                raise IndexFormatError(
                    f"the index names the embedder {name!r}, which cannot exist ({e}); re-index the documents"
                ) from e
    raise EmbedderMismatchError(
        f"this index was built with the embedder {name!r} (dim {identity.get('dim')}); "
        "pass the same embedder: RAG.load(path, embed=...)"
    )


# ----------------------------------------------------------------------------- RAG


class RAG:
    """Index documents and retrieve or answer over them, offline, with any embedder.

    ``embed``: an embedder (``embed_documents`` / ``embed_query``), ``"hashing"`` for
    :class:`HashingEmbeddings`, or ``None`` for lexical-only search.
    ``path``: an index directory; loaded at construction when it holds an index, and
    the default target of :meth:`save`.
    ``bm25_alpha``: weight of dense scores against BM25 (see the module docstring).
    ``bm25_autorebuild``: rebuild BM25 statistics lazily at the next search after
    changes (default); when False, only :meth:`rebuild_bm25_from_store` does, and
    lexical search sees the chunks of the last rebuild.
    ``reranker``: None, ``"noop"``, ``"diversity"`` (MMR), a reranker object
    (``rerank(query, hits, top_k, vectors)``) or a cross-encoder scorer
    (``score(query, texts)``, ``predict(pairs)`` or ``f(query, texts)``).
    ``query_expander``: ``f(query) -> list[str]``; rankings of all queries are fused.
    ``generate_fn``: the default LLM of :meth:`query` (anything ``selfrag_core.llm`` calls).
    ``stemmer``: ``"auto"`` (PyStemmer if installed), ``"pystemmer"`` or ``None``.

    A ``RAG`` is a retrieval backend for every strategy (``retrieve``/``aretrieve``,
    ``add_document``). Sync methods never touch an event loop; async ones run the
    CPU work in a thread.
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
    ) -> None:
        self.embedder = _resolve_embedder(embed)
        self.chunker = Chunker(chunker, chunk_size, chunk_overlap)
        if bm25_alpha is None:
            bm25_alpha = 0.5 if self.embedder is not None else 0.0
        if (
            isinstance(bm25_alpha, bool)
            or not isinstance(bm25_alpha, (int, float))
            or not 0 <= bm25_alpha <= 1
        ):
            raise ConfigurationError(f"bm25_alpha must be a number in [0, 1] or None, got {bm25_alpha!r}")
        if bm25_alpha > 0 and self.embedder is None:
            raise ConfigurationError(
                f"bm25_alpha={bm25_alpha} weights dense search, but no embedder was given: pass embed=..."
            )
        if query_expander is not None and not callable(query_expander):
            raise TypeError("query_expander must be a callable f(query) -> list[str]")
        check_int("llm_retries", llm_retries, 0)
        self.bm25_alpha = float(bm25_alpha)
        self.bm25_autorebuild = bool(bm25_autorebuild)
        self.reranker: Reranker | None = make_reranker(reranker)
        self._reranker_spec = reranker if isinstance(reranker, str) else None
        self.query_expander = query_expander
        self.generate_fn = generate_fn
        self.stemmer = stemmer
        self.llm_retries = llm_retries
        self.path = Path(path) if path is not None else None

        self._lock = threading.RLock()
        self._search_cpu_s: float | None = None  # the last search's CPU time per query; None before any
        self._disk_version: tuple[int, int, int] | None = None  # of the manifest last loaded or saved
        self._tokenizer = Tokenizer(stemmer) if self.bm25_alpha < 1 else None
        self._lexical = LexicalIndex()
        self._lexical_dirty = False
        self._chunks: list[_Chunk] = []
        self._rows: list[np.ndarray] = []  # one unit vector per chunk (with an embedder)
        self._matrix: np.ndarray | None = None
        self._sources: dict[str, str] = {}  # source -> checksum
        self._dim: int | None = None
        for attr in ("dim", "dimension"):
            value = getattr(self.embedder, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                self._dim = value
                break
        self._mmr_embedder = HashingEmbeddings(512)
        if self.embedder is None:
            logger.info("selfrag store: no embedder given, so search is lexical (BM25) only")
        if self.path is not None:
            if (self.path / MANIFEST).exists():
                version = _manifest_version(self.path)  # before loading: a later save is seen later
                self._restore(load_index(self.path))
                self._disk_version = version
            elif self.path.is_dir() and any(self.path.iterdir()):
                raise IndexFormatError(
                    f"{self.path} is a non-empty directory without a selfrag index; "
                    "choose a new or empty directory"
                )

    def __repr__(self) -> str:
        mode = "lexical" if self.bm25_alpha == 0 else "dense" if self.bm25_alpha == 1 else "hybrid"
        return f"RAG(chunks={self.count()}, sources={len(self._sources)}, mode={mode})"

    # ------------------------------------------------------------------ configuration

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **overrides: Any) -> RAG:
        """Build a RAG from a TOML file (keys at top level or under ``[rag]``).

        Keys: embed ("hashing"), path, chunker, chunk_size, chunk_overlap, bm25_alpha,
        bm25_autorebuild, reranker ("noop" / "diversity"), stemmer, llm_retries. A
        relative ``path`` is relative to the file. ``overrides`` win over the file.
        """
        file = Path(path)
        try:
            data = _load_toml(file)
        except OSError as e:
            raise ConfigurationError(f"cannot read the config file {file}: {e}") from e
        except ValueError as e:  # tomllib.TOMLDecodeError
            raise ConfigurationError(f"{file} is not valid TOML: {e}") from e
        table = data.get("rag", data)
        if not isinstance(table, dict):
            raise ConfigurationError(f"[rag] in {file} must be a table")
        unknown = sorted(set(table) - set(_CONFIG_KEYS))
        if unknown:
            raise ConfigurationError(f"unknown keys {unknown} in {file}; known keys: {list(_CONFIG_KEYS)}")
        settings = dict(table)
        if isinstance(settings.get("path"), str) and not Path(settings["path"]).is_absolute():
            settings["path"] = file.parent / settings["path"]
        settings.update(overrides)
        embed = settings.pop("embed", None)
        return cls(embed, **settings)

    def set_generate_fn(self, generate_fn: Any) -> None:
        """Set or replace the default LLM of :meth:`query`."""
        self.generate_fn = generate_fn

    def _identity(self) -> dict[str, Any] | None:
        if self.embedder is None:
            return None
        return {"name": embedder_name(self.embedder), "dim": self._dim}

    # ------------------------------------------------------------------ chunking

    def chunk(self, text: str, **metadata: Any) -> list[TextChunk]:
        """Split ``text`` with this RAG's chunker, without indexing."""
        return self.chunker.chunk(_check_text(text), **_check_metadata(metadata))

    # ------------------------------------------------------------------ indexing

    def _prepare(
        self, text: Any, source: Any, checksum: Any, metadata: Mapping[str, Any]
    ) -> _Document | None:
        text = _check_text(text)
        meta = _check_metadata(metadata)
        source = _check_source(source)
        meta_json = json.dumps(meta, sort_keys=True)
        if source is None:  # content-addressed: never collides with another document
            source = "doc-" + _digest(text, meta_json)[:16]
        if checksum is not None and not isinstance(checksum, str):
            raise TypeError(f"checksum must be a str or None, got {type(checksum).__name__}")
        checksum = checksum or _digest(text, meta_json, json.dumps(self.chunker.settings()))
        if self._sources.get(source) == checksum:
            return None
        chunks = []
        for c in self.chunker.chunk(text, **meta):
            chunk_meta = {**c.metadata, "source": source, "chunk_index": c.index}
            tokens = self._tokenizer(c.text) if self._tokenizer is not None else []
            chunks.append(_Chunk(f"{source}#{c.index}", c.text, source, chunk_meta, tokens))
        return _Document(source, checksum, chunks)

    def _embed_chunks(self, chunks: list[_Chunk]) -> np.ndarray | None:
        if self.embedder is None or not chunks:
            return None
        parts = []
        for i in range(0, len(chunks), _EMBED_BATCH):
            texts = [c.text for c in chunks[i : i + _EMBED_BATCH]]
            parts.append(as_matrix(self.embedder.embed_documents(texts), len(texts)))
        matrix = np.vstack(parts)
        self._check_dim(matrix.shape[1])
        return matrix

    def _check_dim(self, dim: int) -> None:
        if self._dim is None:
            self._dim = dim
        elif dim != self._dim:
            raise EmbedderMismatchError(
                f"the embedder returned {dim}-dimensional vectors but the index holds "
                f"{self._dim}-dimensional ones; use the embedder the index was built with"
            )

    def _commit(self, docs: list[_Document], vectors: np.ndarray | None) -> int:
        latest = {d.source: d for d in docs}  # within one batch, the last version of a source wins
        with self._lock:
            replaced = {s for s in latest if s in self._sources}
            if replaced:
                keep = [i for i, c in enumerate(self._chunks) if c.source not in replaced]
                self._chunks = [self._chunks[i] for i in keep]
                if self.embedder is not None:
                    self._rows = [self._rows[i] for i in keep]
            row = 0
            added = 0
            for doc in docs:
                n = len(doc.chunks)
                if latest[doc.source] is doc:
                    self._chunks.extend(doc.chunks)
                    if vectors is not None:
                        self._rows.extend(vectors[row : row + n])
                    self._sources[doc.source] = doc.checksum
                    added += n
                row += n
            if replaced or added:
                self._lexical_dirty = True
                self._matrix = None
            return added

    def index(
        self, text: str, source: str | None = None, checksum: str | None = None, **metadata: Any
    ) -> int:
        """Index one document; returns the number of chunks created (0 when unchanged).

        A ``source`` already indexed with the same checksum (given, or computed from
        the text, metadata and chunker settings) is skipped; with another checksum
        its chunks are replaced. Without a source, the document gets a generated,
        content-derived one (``doc-<hash>``), so it never replaces another document.
        """
        item = self._prepare(text, source, checksum, metadata)
        return 0 if item is None else self._store([item])

    def index_many(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """Index several documents in one batch (one embedding pass, one BM25 rebuild).

        Each item is a dict with ``text`` and optionally ``source``, ``checksum``,
        ``metadata`` (a dict) and further metadata keys. Every document is checked
        first: one bad document raises and nothing of the batch is indexed.
        """
        prepared: list[_Document] = []
        for i, doc in enumerate(documents):
            if not isinstance(doc, Mapping):
                raise TypeError(f"document {i} must be a dict with a 'text' key, got {type(doc).__name__}")
            if "text" not in doc:
                raise ValueError(f"document {i} has no 'text' key")
            extra = {k: v for k, v in doc.items() if k not in ("text", "source", "checksum", "metadata")}
            nested = doc.get("metadata") or {}
            if not isinstance(nested, Mapping):
                raise TypeError(f"document {i}: 'metadata' must be a dict")
            try:
                item = self._prepare(doc["text"], doc.get("source"), doc.get("checksum"), {**nested, **extra})
            except (TypeError, ValueError) as e:
                raise type(e)(f"document {i}: {e}") from e
            if item is not None:
                prepared.append(item)
        return self._store(prepared) if prepared else 0

    def _store(self, prepared: list[_Document]) -> int:
        return self._commit(prepared, self._embed_chunks([c for d in prepared for c in d.chunks]))

    async def aindex(
        self, text: str, source: str | None = None, checksum: str | None = None, **metadata: Any
    ) -> int:
        """Async :meth:`index` (the work runs in a thread)."""
        return await asyncio.to_thread(self.index, text, source, checksum, **metadata)

    async def aindex_many(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """Async :meth:`index_many` (the work runs in a thread)."""
        return await asyncio.to_thread(self.index_many, list(documents))

    def add_document(self, text: str, metadata: Mapping[str, Any] | None = None) -> int:
        """The strategies' ``add_document``: ``metadata['source']`` and ``['checksum']`` are honoured."""
        meta = dict(metadata or {})
        return self.index(text, source=meta.pop("source", None), checksum=meta.pop("checksum", None), **meta)

    def delete(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many were removed."""
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        with self._lock:
            if source not in self._sources:
                return 0
            keep = [i for i, c in enumerate(self._chunks) if c.source != source]
            removed = len(self._chunks) - len(keep)
            self._chunks = [self._chunks[i] for i in keep]
            if self.embedder is not None:
                self._rows = [self._rows[i] for i in keep]
            del self._sources[source]
            self._lexical_dirty = True
            self._matrix = None
            return removed

    def count(self) -> int:
        """Number of indexed chunks."""
        return len(self._chunks)

    def __len__(self) -> int:
        return self.count()

    def sources(self) -> dict[str, str]:
        """Indexed sources and their checksums."""
        with self._lock:
            return dict(self._sources)

    @property
    def bm25_rebuilds(self) -> int:
        """How many times the BM25 statistics were rebuilt (for tests and diagnostics)."""
        return self._lexical.rebuilds

    def rebuild_bm25_from_store(self) -> int:
        """Re-tokenise every stored chunk and rebuild BM25 now; returns the number of chunks."""
        if self._tokenizer is None:
            raise ConfigurationError("BM25 is disabled (bm25_alpha=1): there is no lexical index to rebuild")
        with self._lock:
            for c in self._chunks:
                c.tokens = self._tokenizer(c.text)
            self._rebuild_lexical()
            return len(self._chunks)

    def _rebuild_lexical(self) -> None:
        self._lexical.build([c.id for c in self._chunks], [c.tokens for c in self._chunks])
        self._lexical_dirty = False

    # ------------------------------------------------------------------ search

    def _lexical_scores(self, query: str) -> np.ndarray:
        assert self._tokenizer is not None
        if self._lexical_dirty and self.bm25_autorebuild:
            self._rebuild_lexical()
        raw = self._lexical.scores(self._tokenizer(query))
        if not self._lexical_dirty:
            return raw
        position = {c.id: i for i, c in enumerate(self._chunks)}  # stale index: map by chunk id
        out = np.zeros(len(self._chunks), dtype=np.float32)
        for i, cid in enumerate(self._lexical.ids):
            p = position.get(cid)
            if p is not None:
                out[p] = raw[i]
        return out

    def _dense_scores(self, qvecs: np.ndarray) -> np.ndarray:
        """Cosine scores, one column per row of ``qvecs``: a (chunks, queries) matrix."""
        if self._matrix is None:
            dim = self._dim or 1
            self._matrix = np.vstack(self._rows) if self._rows else np.zeros((0, dim), np.float32)
        if self._matrix.shape[1] != qvecs.shape[1] and len(self._rows):
            self._check_dim(qvecs.shape[1])
        # einsum is single-threaded: a BLAS matrix-vector product spread over busy cores was
        # ~5x slower on a shared 2-core machine (benchmarks/retrieval_scifact.py)
        scores: np.ndarray = np.einsum("ij,kj->ik", self._matrix, qvecs)
        return scores

    def _query_vectors(self, queries: list[str]) -> np.ndarray | None:
        """One unit row per query: from one ``embed_queries`` call where the embedder has
        it (the built-in ones), else ``embed_query`` per query (a LangChain embedder's
        query vectors may differ from its document vectors, so never ``embed_documents``)."""
        if self.embedder is None or self.bm25_alpha == 0:
            return None
        many = getattr(self.embedder, "embed_queries", None)
        raw = many(queries) if callable(many) else [np.asarray(self.embedder.embed_query(q)) for q in queries]
        vecs = as_matrix(raw, len(queries))
        if self._dim is not None and vecs.shape[1] != self._dim:
            self._check_dim(vecs.shape[1])
        return vecs

    def _mask(self, metadata_filter: Any, filters: Mapping[str, Any]) -> np.ndarray | None:
        conditions = dict(filters)
        predicate: Callable[[dict[str, Any]], Any] | None = None
        if isinstance(metadata_filter, Mapping):
            conditions.update(metadata_filter)
        elif callable(metadata_filter):
            predicate = metadata_filter
        elif metadata_filter is not None:
            raise TypeError("metadata_filter must be a dict or a callable f(metadata) -> bool")
        if not conditions and predicate is None:
            return None

        def keep(meta: dict[str, Any]) -> bool:
            if not all(k in meta and _matches(meta[k], v) for k, v in conditions.items()):
                return False
            return predicate is None or bool(predicate(dict(meta)))

        return np.fromiter((keep(c.metadata) for c in self._chunks), dtype=bool, count=len(self._chunks))

    def _rank(
        self, query: str, dense: np.ndarray | None, valid: np.ndarray | None, pool: int
    ) -> list[tuple[int, float, float | None, float | None]]:
        """Top ``pool`` (position, score, lexical, dense) for one query, given its dense
        scores, among the ``valid`` positions (all when None)."""
        lex = self._lexical_scores(query) if self.bm25_alpha < 1 else None
        if lex is not None and dense is not None:
            a = self.bm25_alpha
            score = a * _minmax(dense, valid) + (1 - a) * _minmax(lex, valid)
        elif lex is not None:
            score = lex
            valid = lex > 0 if valid is None else valid & (lex > 0)
        else:
            assert dense is not None
            score = dense
        candidates = np.arange(score.shape[0]) if valid is None else np.flatnonzero(valid)
        if candidates.size > pool:
            part = np.argpartition(-score[candidates], pool - 1)[:pool]
            candidates = candidates[part]
        order = candidates[np.argsort(-score[candidates], kind="stable")]
        return [
            (
                int(p),
                float(score[p]),
                None if lex is None else float(lex[p]),
                None if dense is None else float(dense[p]),
            )
            for p in order
        ]

    def _queries(self, query: str) -> list[str]:
        queries = [query]
        if self.query_expander is not None:
            extra = self.query_expander(query)
            if isinstance(extra, str) or not isinstance(extra, Iterable):
                raise TypeError("query_expander must return a list of strings")
            for q in extra:
                if isinstance(q, str) and q.strip() and q.strip() not in queries:
                    queries.append(q.strip())
        return queries

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
        queries = [validate_query(q) for q in _query_list(queries)]
        check_int("top_k", top_k, 1)
        groups = [self._queries(q) for q in queries]  # each query with its expansions
        qvecs = self._query_vectors([q for group in groups for q in group]) if queries else None
        reranking = self.reranker is not None
        pool = max(4 * top_k, 20) if reranking else top_k
        found: list[tuple[list[SearchHit], np.ndarray | None]] = []
        with self._lock:
            if not self._chunks:
                return [[] for _ in queries]
            mask = self._mask(metadata_filter, filters)
            dense = self._dense_scores(qvecs) if qvecs is not None else None
            column = 0
            for group in groups:
                rankings = []
                for q in group:
                    rankings.append(self._rank(q, None if dense is None else dense[:, column], mask, pool))
                    column += 1
                ranked = rankings[0] if len(rankings) == 1 else self._fuse(rankings, pool)
                hits = [self._hit(p, s, lx, dn) for p, s, lx, dn in ranked]
                found.append((hits, self._hit_vectors([p for p, *_ in ranked]) if reranking else None))
        results = []
        for query, (hits, vectors) in zip(queries, found, strict=True):
            if self.reranker is not None and vectors is not None:
                hits = self.reranker.rerank(query, hits, top_k, vectors)
            results.append(hits[:top_k])
        return results

    @staticmethod
    def _fuse(
        rankings: list[list[tuple[int, float, float | None, float | None]]], pool: int
    ) -> list[tuple[int, float, float | None, float | None]]:
        fused: dict[int, list[Any]] = {}
        for ranking in rankings:
            for rank, (p, _, lx, dn) in enumerate(ranking):
                entry = fused.setdefault(p, [p, 0.0, lx, dn])
                entry[1] += 1.0 / (_RRF_K + rank + 1)
        ordered = sorted(fused.values(), key=lambda e: -e[1])[:pool]
        return [(e[0], e[1], e[2], e[3]) for e in ordered]

    def _hit(self, pos: int, score: float, lexical: float | None, dense: float | None) -> SearchHit:
        c = self._chunks[pos]
        return SearchHit(
            c.text, score, dict(c.metadata), c.id, ScoreKind.SIMILARITY,
            source=c.source, lexical_score=lexical, dense_score=dense,
        )  # fmt: skip

    def _hit_vectors(self, positions: list[int]) -> np.ndarray:
        if self.embedder is not None and self._rows:
            return np.vstack([self._rows[p] for p in positions]) if positions else np.zeros((0, 1))
        return self._mmr_embedder.embed_documents([self._chunks[p].text for p in positions])

    async def asearch(
        self, query: str, top_k: int = 5, *, metadata_filter: Any = None, **filters: Any
    ) -> list[SearchHit]:
        """Async :meth:`search` (on the event loop or a thread, as :meth:`asearch_many`)."""
        return (await self.asearch_many([query], top_k, metadata_filter=metadata_filter, **filters))[0]

    async def asearch_many(
        self, queries: Sequence[str], top_k: int = 5, *, metadata_filter: Any = None, **filters: Any
    ) -> list[list[SearchHit]]:
        """Async :meth:`search_many`. It runs in a worker thread unless the last search
        took less than ``INLINE_SEARCH_S`` of CPU for as many queries (a small index, a
        cheap embedder): then on the event loop, which costs less than the thread hop
        and blocks it for less than a millisecond. Measured on every call, so a slow
        embedder or reranker (or an index that grew) goes back to threads at once."""
        queries = _query_list(queries)
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

    def _llm(self, generate_fn: Any) -> Any:
        llm = generate_fn if generate_fn is not None else self.generate_fn
        if llm is None:
            raise ConfigurationError(
                "no LLM to answer with: pass generate_fn=... to query() or RAG(generate_fn=...)"
            )
        return llm

    @staticmethod
    def _template(prompt_template: str | None, question: str) -> PromptTemplate:
        if prompt_template is None:
            return Prompts().get("answer", detect_language(question))
        if not isinstance(prompt_template, str):
            raise TypeError("prompt_template must be a str")
        absent = [v for v in ("context", "question") if "{" + v + "}" not in prompt_template]
        if absent:
            raise ConfigurationError(f"prompt_template must contain the placeholders {absent}")
        return PromptTemplate("rag_answer", prompt_template, ("context", "question"))

    @staticmethod
    def _result(answer: LLMReply | None, hits: list[SearchHit], prompt: str, start: float) -> QueryResult:
        sources = list(dict.fromkeys(h.source for h in hits))
        if answer is None:
            return QueryResult("", hits, sources, prompt, Usage(), time.perf_counter() - start, False)
        usage = Usage(answer.input_tokens, answer.output_tokens, answer.attempts)
        return QueryResult(answer.text, hits, sources, prompt, usage, time.perf_counter() - start)

    def _answer_plan(
        self,
        question: str,
        generate_fn: Any,
        top_k: int,
        prompt_template: str | None,
        max_context_chars: int | None,
        allow_llm_on_empty: bool,
        generate_timeout: float | None,
        filters: dict[str, Any],
    ) -> Generator[tuple[str, dict[str, Any]], Any, QueryResult]:
        """The steps of a query, shared by :meth:`query` and :meth:`aquery`: yields
        ("search", kwargs) and ("generate", kwargs) and receives their results."""
        start = time.perf_counter()
        question = validate_query(question, name="question")
        llm, template = self._llm(generate_fn), self._template(prompt_template, question)
        hits = yield "search", {"query": question, "top_k": top_k, **filters}
        prompt = template.format(context=format_hits(hits, max_context_chars), question=question)
        if not hits and not allow_llm_on_empty:
            return self._result(None, hits, prompt, start)
        reply = yield "generate", {
            "llm": llm, "prompt": prompt, "retries": self.llm_retries,
            "timeout": generate_timeout, "purpose": "rag_answer",
        }  # fmt: skip
        return self._result(reply, hits, prompt, start)

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

        ``generate_timeout`` bounds each LLM attempt (``LLMTimeoutError`` past it);
        with ``allow_llm_on_empty=False`` and no hits, the LLM is not called and the
        answer is empty (``llm_called`` is False). Safe inside a running event loop.
        """
        plan = self._answer_plan(
            question, generate_fn, top_k, prompt_template, max_context_chars,
            allow_llm_on_empty, generate_timeout, filters,
        )  # fmt: skip
        value: Any = None
        try:
            while True:
                kind, kwargs = plan.send(value)
                value = self.search(**kwargs) if kind == "search" else call_llm_detailed(**kwargs)
        except StopIteration as done:
            result: QueryResult = done.value
            return result

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
        plan = self._answer_plan(
            question, generate_fn, top_k, prompt_template, max_context_chars,
            allow_llm_on_empty, generate_timeout, filters,
        )  # fmt: skip
        value: Any = None
        try:
            while True:
                kind, kwargs = plan.send(value)
                value = await (self.asearch(**kwargs) if kind == "search" else acall_llm_detailed(**kwargs))
        except StopIteration as done:
            result: QueryResult = done.value
            return result

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the index to ``path`` (default: the ``path`` given at construction), atomically."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("no path to save to: pass save(path) or RAG(path=...)")
        with self._lock:
            settings: dict[str, Any] = {
                "bm25_alpha": self.bm25_alpha,
                "bm25_autorebuild": self.bm25_autorebuild,
                "stemmer": self.stemmer,
                **self.chunker.settings(),
            }
            if self._reranker_spec is not None:
                settings["reranker"] = self._reranker_spec
            vectors = None
            if self.embedder is not None and self._dim is not None:
                vectors = np.vstack(self._rows) if self._rows else np.zeros((0, self._dim), np.float32)
            save_index(
                target,
                settings={
                    "embedder": self._identity(),
                    "tokenizer": None if self._tokenizer is None else self._tokenizer.stemming,
                    "settings": settings,
                },
                chunks=[
                    {"id": c.id, "text": c.text, "source": c.source, "metadata": _json_safe(c.metadata)}
                    for c in self._chunks
                ],
                sources=dict(self._sources),
                vectors=vectors,
            )
        if self.path is None:
            self.path = target
        if target == self.path:
            self._disk_version = _manifest_version(target)
        return target

    def changed_on_disk(self) -> bool:
        """Whether another process (a second ``selfrag serve`` worker, ``selfrag index``)
        saved the index at ``path`` since this object last loaded or saved it. One
        ``stat`` call: cheap enough to ask before every query."""
        return self.path is not None and _manifest_version(self.path) not in (None, self._disk_version)

    def refresh(self) -> bool:
        """Reload the index from ``path`` if it :meth:`changed_on_disk`; returns whether it
        did. Concurrent searches see either the old or the new index, never a mix."""
        if not self.changed_on_disk():
            return False
        assert self.path is not None
        version = _manifest_version(self.path)
        self._restore(load_index(self.path))  # swaps the state under the lock when it is ready
        self._disk_version = version
        logger.info("selfrag store: reloaded %s (saved by another process)", self.path)
        return True

    @classmethod
    def load(cls, path: str | os.PathLike[str], embed: Any = None, **overrides: Any) -> RAG:
        """Open a saved index. Its saved settings apply unless overridden; ``embed`` must be
        the embedder it was built with (the built-in hashing embedder is recreated)."""
        version = _manifest_version(Path(path))  # before loading: a later save is seen later
        stored = load_index(path)  # the manifest is validated: settings and embedder have their types
        settings = {k: v for k, v in stored.manifest["settings"].items() if k in _CONFIG_KEYS}
        settings.update(overrides)
        identity = stored.manifest["embedder"]
        if embed is None and identity is not None:
            embed = _embedder_from_identity(identity)
        rag = cls(embed, **settings)
        rag._restore(stored)
        rag.path = Path(path)
        rag._disk_version = version
        return rag

    def _restore(self, stored: StoredIndex) -> None:
        identity = stored.manifest.get("embedder")
        mine = self._identity()
        if identity and mine is None:
            raise EmbedderMismatchError(
                f"this index was built with the embedder {identity.get('name')!r}; pass it: embed=..."
            )
        if mine is not None and not identity and stored.chunks:
            raise EmbedderMismatchError(
                "this index was built without an embedder (lexical only); load it without embed= "
                "or re-index into a new directory"
            )
        if mine is not None and identity:
            if identity.get("name") != mine["name"]:
                raise EmbedderMismatchError(
                    f"this index was built with the embedder {identity.get('name')!r}, not {mine['name']!r}; "
                    "pass the same embedder or re-index into a new directory"
                )
            dim = identity.get("dim")
            if isinstance(dim, int):
                self._check_dim(dim)
        chunks = []
        for c in stored.chunks:
            tokens = self._tokenizer(c["text"]) if self._tokenizer is not None else []
            chunks.append(_Chunk(c["id"], c["text"], c["source"], dict(c["metadata"]), tokens))
        with self._lock:
            self._chunks = chunks
            self._sources = dict(stored.sources)
            if stored.vectors is not None and self.embedder is not None:
                self._check_dim(int(stored.vectors.shape[1]))
                self._rows = list(stored.vectors)
            self._matrix = None
            self._lexical_dirty = True

"""The index of the embedded backend: the chunks of the indexed documents, their unit
vectors (with an embedder), their BM25 statistics and each source's checksum, behind
one lock. Documents are checked, chunked and embedded outside the lock, then added,
replaced or deleted under it. The raw lexical and dense scores
:mod:`~selfrag_core.store.search` ranks by come from here, and so do the snapshot a
save writes and the restore from a saved index (:mod:`~selfrag_core.store.persist`).

A restored index searches the saved vectors and BM25 arrays where they lie, memory-mapped:
nothing is tokenised or rebuilt, and a chunk is decoded only when it is read
(:class:`StoredChunks`, :class:`Chunks`), its tokens only if BM25 must be rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from selfrag_core.ingest import digest as _digest  # content-addressed sources and checksums
from selfrag_core.store import ann
from selfrag_core.store.chunking import Chunker
from selfrag_core.store.dense import as_matrix, dot_scores, embedder_name
from selfrag_core.store.lexical import LexicalIndex, Postings, Tokenizer
from selfrag_core.store.persist import (
    VECTORS_FILE,
    ChunkColumns,
    Delta,
    EmbedderMismatchError,
    LazySequence,
    StoredIndex,
)
from selfrag_core.types import _json_safe

logger = logging.getLogger("selfrag")

#: texts per embedder call when the embedder has no ``batch_size``
_EMBED_BATCH = 256
#: ... and for one that has, this many of its batches a call
_EMBED_BATCHES_A_CALL = 2


def embed_step(embedder: Any) -> int:
    """How many texts :meth:`Index._embed` gives ``embedder`` a call: two of its own
    batches (``batch_size``; 64 texts for MiniLM, a few seconds on two cores), so progress
    advances from the first call, else :data:`_EMBED_BATCH`."""
    size = getattr(embedder, "batch_size", None)
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size * _EMBED_BATCHES_A_CALL
    return _EMBED_BATCH


_SCALARS = (str, int, float, bool, type(None))
#: control characters other than whitespace, and the replacement character of undecodable bytes
_ODD_CHARACTERS = re.compile("[\x00-\x08\x0e-\x1f\ufffd]")


@dataclass(slots=True)  # a million of them in a large index: no per-object dict
class IndexedChunk:
    id: str
    text: str
    source: str
    metadata: dict[str, Any]
    tokens: list[str] | None  # None: not tokenised yet (restored from disk)


class StoredChunks(LazySequence[IndexedChunk]):
    """The chunks of a restored index, read from its memory-mapped columns: each
    :class:`IndexedChunk` is made when it is asked for (its metadata parsed and checked then)."""

    def __init__(self, columns: ChunkColumns) -> None:
        self.columns = columns
        self._metadata: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.columns)

    def _at(self, i: int) -> IndexedChunk:
        c = self.columns
        meta = c.metadata_at(i) if self._metadata is None else self._metadata[i]
        return IndexedChunk(c.ids[i], c.texts[i], c.source_of(i), meta, None)

    def all_metadata(self) -> list[dict[str, Any]]:
        """Every chunk's metadata (parsed at the first metadata filter, then kept)."""
        if self._metadata is None:
            self._metadata = [self.columns.metadata_at(i) for i in range(len(self))]
        return self._metadata


@dataclass
class PreparedDocument:
    """A document checked and chunked, not yet in the index."""

    source: str
    checksum: str
    chunks: list[IndexedChunk]


@dataclass
class Changes:
    """What changed in an index since it was restored or saved: the documents added or
    replaced, as indexed (their chunks' ``vectors`` in order, with an embedder), and the
    sources deleted."""

    docs: list[PreparedDocument]
    vectors: np.ndarray | None
    deleted: list[str]


@dataclass
class Preparer:
    """What checks, chunks and tokenises documents as an index does, and embeds their
    chunks, in another process (a Ray worker of ``selfrag index --ray``): the index's
    chunker settings, whether and how it tokenises for BM25, and its sources' checksums
    (a document indexed with its checksum already is skipped). Picklable; the embedder
    is the worker's own (:meth:`embed`)."""

    chunker: dict[str, Any]
    stemmer: str | None
    tokenized: bool
    checksums: dict[str, str]

    def _index(self, embedder: Any = None) -> Index:
        settings = self.chunker
        chunker = Chunker(settings["chunker"], settings["chunk_size"], settings["chunk_overlap"])
        index = Index(
            embedder, chunker, Tokenizer(self.stemmer) if self.tokenized else None, autorebuild=False
        )
        index._sources = dict(self.checksums)
        return index

    def prepare(self, documents: Iterable[Mapping[str, Any]]) -> list[PreparedDocument]:
        """:meth:`Index.prepare_many` as the index would (the documents it would skip skipped)."""
        return self._index().prepare_many(documents)

    def embed(self, embedder: Any, docs: Sequence[PreparedDocument]) -> np.ndarray | None:
        """The unit vectors of the documents' chunks, in order, as the index embeds them."""
        return self._index(embedder)._embed([c for d in docs for c in d.chunks])


# ----------------------------------------------------------------------------- input checks


def check_text(text: Any) -> str:
    if isinstance(text, (bytes, bytearray)):
        raise TypeError("text is bytes: decode it first (e.g. data.decode('utf-8'))")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: there is nothing to index")
    sample = text[:100_000]
    odd = len(_ODD_CHARACTERS.findall(sample))
    if "\x00" in sample or odd > 0.05 * len(sample):
        raise ValueError(
            "text looks like binary data (NUL, control or undecodable characters); index text files only"
        )
    return text


def check_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"metadata keys must be strings, got {key!r}")
        if not isinstance(value, _SCALARS):
            raise TypeError(
                f"metadata value for {key!r} must be a str, int, float, bool or None "
                f"(got {type(value).__name__}); it is stored as JSON"
            )
    return dict(metadata)


def _declared_dim(embedder: Any) -> int | None:
    for attr in ("dim", "dimension"):
        value = getattr(embedder, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class Chunks(LazySequence[IndexedChunk]):
    """The index's chunks, in order: the ones of the saved base it was restored from that
    are still in it (``kept``: their positions in ``base``; None: all of them), then the
    ones added since (``tail``). Deleting chunks replaces ``kept`` and ``tail`` by what
    stays; nothing of the base is decoded but what is read."""

    def __init__(
        self,
        base: StoredChunks | None = None,
        kept: np.ndarray | None = None,
        tail: list[IndexedChunk] | None = None,
    ) -> None:
        self.base = base
        self.kept = kept
        self.tail: list[IndexedChunk] = tail if tail is not None else []

    @property
    def in_base(self) -> int:
        """How many of the chunks are the base's (the first ones)."""
        if self.base is None:
            return 0
        return len(self.base) if self.kept is None else len(self.kept)

    def __len__(self) -> int:
        return self.in_base + len(self.tail)

    def _at(self, i: int) -> IndexedChunk:
        base = self.in_base
        if i >= base:
            return self.tail[i - base]
        assert self.base is not None
        return self.base._at(i if self.kept is None else int(self.kept[i]))

    def at(self, positions: Iterable[int]) -> list[IndexedChunk]:
        """The chunks at ``positions`` (each in range: a search's), without the checks of
        ``chunks[i]``."""
        if self.base is None:
            tail = self.tail
            return [tail[i] for i in positions]
        return [self._at(i) for i in positions]

    def metadata(self) -> Iterable[dict[str, Any]]:
        """Every chunk's metadata, in order (the base's parsed once, then kept)."""
        if self.base is not None:
            every = self.base.all_metadata()
            yield from every if self.kept is None else (every[int(i)] for i in self.kept)
        for c in self.tail:
            yield c.metadata

    def base_sources(self) -> dict[str, str]:
        """The sources of the base's chunks still here, with their checksums (decoded)."""
        if self.base is None:
            return {}
        columns = self.base.columns
        codes = None if self.kept is None else np.unique(columns.chunk_sources[self.kept])
        return columns.source_dict(codes)

    def positions_without(self, sources: set[str]) -> np.ndarray:
        """The positions of the chunks of other sources than ``sources`` (ascending)."""
        parts = []
        if self.base is not None:
            columns = self.base.columns
            drop = [i for i, name in enumerate(columns.sources) if name in sources]
            codes = columns.chunk_sources if self.kept is None else columns.chunk_sources[self.kept]
            parts.append(np.flatnonzero(~np.isin(codes, drop)))
        base = self.in_base
        parts.append(
            np.asarray([base + i for i, c in enumerate(self.tail) if c.source not in sources], np.int64)
        )
        return np.concatenate(parts).astype(np.int64, copy=False)

    def keep(self, positions: np.ndarray) -> Chunks:
        """The chunks at ``positions`` (ascending), in a new :class:`Chunks`."""
        base = self.in_base
        split = int(np.searchsorted(positions, base))
        kept = None
        if self.base is not None:
            mine = positions[:split]
            kept = mine if self.kept is None else self.kept[mine]
            if self.kept is None and len(mine) == len(self.base):
                kept = None
        return Chunks(self.base, kept, [self.tail[int(i) - base] for i in positions[split:]])


def _columns(chunks: Sequence[IndexedChunk], sources: Mapping[str, str]) -> ChunkColumns:
    """The chunks and their sources as a save writes them."""
    return ChunkColumns.build(
        [c.id for c in chunks],
        [c.text for c in chunks],
        [_json_safe(c.metadata) for c in chunks],
        [c.source for c in chunks],
        sources,
    )


# ----------------------------------------------------------------------------- the index


def _restored_chunks(
    stored: StoredIndex, kept: np.ndarray | None, tail: list[IndexedChunk]
) -> tuple[Chunks, dict[str, str] | None]:
    """A saved index's chunks (its base's ``kept`` ones, then the delta's ``tail``), and
    their sources when the format keeps them whole (formats 1 and 2, read as records)."""
    if stored.columns is not None:
        return Chunks(StoredChunks(stored.columns), kept, tail), None
    records = [IndexedChunk(c["id"], c["text"], c["source"], c["metadata"], None) for c in stored.chunks]
    return Chunks(None, None, records), dict(stored.sources)


class Index:
    """Chunks, vectors, BM25 statistics and source checksums, changed under ``lock``.

    ``tokenizer`` is None when BM25 is off (dense search only); ``autorebuild``: the BM25
    statistics are brought up to date at the first search after changes (else only by
    :meth:`rebuild_lexical`, and lexical search sees the chunks of the last rebuild).

    A restored index keeps its saved base as it is (memory-mapped): chunks added later go
    after it (:class:`Chunks`), with their vectors and a BM25 segment of their own, and
    deleted ones are left out of it by position. So changing a large index costs what
    the change costs, and the next save into the same directory writes only a delta
    (:class:`~selfrag_core.store.persist.Delta`) while the delta stays small.
    """

    #: a save writes the whole index again once the delta would hold more chunks than
    #: this share of the base's (or the base has lost this share of its chunks)
    DELTA_SHARE = 0.2
    #: ... and always a delta of at most this many chunks
    DELTA_MIN = 20_000

    def __init__(
        self, embedder: Any, chunker: Chunker, tokenizer: Tokenizer | None, *, autorebuild: bool
    ) -> None:
        self.embedder = embedder
        self.chunker = chunker
        self._chunker_json = json.dumps(chunker.settings())  # part of every document's checksum
        self.tokenizer = tokenizer
        self.autorebuild = autorebuild
        self.lock = threading.RLock()
        self.chunks = Chunks()
        self._sources: dict[str, str] | None = {}  # source -> checksum; None: in the base's columns
        self._tail_sources: dict[str, str] = {}  # with None above: the sources of a saved delta
        self.dim = _declared_dim(embedder)
        self._lexical = LexicalIndex()
        # False: restored without usable BM25 arrays, rebuilt from the chunks when needed
        self._lexical_built = True
        #: what made the BM25 index's terms (``Tokenizer.identity``; a restored index's may be
        #: an older tokenizer's: its stemming alone, no identifier or file name terms), saved
        self.lexical_terms: str | None = None if tokenizer is None else tokenizer.identity
        # the unit vectors (with an embedder): the base's, one row per base chunk (deleted
        # ones too), memory-mapped; the tail's in blocks, stacked at the next dense search
        self._base_vectors: np.ndarray | None = None
        self._tail_vectors: list[np.ndarray] = []
        # approximate indexes over the "base" and "tail" vectors when they are many (see _ann)
        self._anns: dict[str, ann.ApproximateIndex | None] = {}
        self.stored: StoredIndex | None = None  # the saved base, when restored from one
        #: the sources added, replaced or deleted since the index was restored (or saved: the
        #: saver clears it), each mapped to whether it was in the index then (see changes())
        self.touched: dict[str, bool] = {}

    @property
    def sources(self) -> dict[str, str]:
        """Source -> checksum (a restored index's are decoded from its columns when first asked)."""
        sources = self._sources
        if sources is None:
            with self.lock:  # restore() swaps the chunks and the sources together, under it
                if self._sources is None:
                    self._sources = {**self.chunks.base_sources(), **self._tail_sources}
                sources = self._sources
        return sources

    # ------------------------------------------------------------------ adding and deleting

    def prepare(
        self, text: Any, source: Any, checksum: Any, metadata: Mapping[str, Any]
    ) -> PreparedDocument | None:
        """``text`` checked and chunked; None when ``source`` is indexed with this checksum
        (given, or computed from the text, metadata and chunker settings) already."""
        text = check_text(text)
        meta = check_metadata(metadata)
        if source is not None and (not isinstance(source, str) or not source.strip()):
            raise TypeError(f"source must be a non-empty str or None, got {source!r}")
        meta_json = json.dumps(meta, sort_keys=True)
        if source is None:  # content-addressed: never collides with another document
            source = "doc-" + _digest(text, meta_json)[:16]
        if checksum is not None and not isinstance(checksum, str):
            raise TypeError(f"checksum must be a str or None, got {type(checksum).__name__}")
        checksum = checksum or _digest(text, meta_json, self._chunker_json)
        if self.sources.get(source) == checksum:
            return None
        chunks = []
        for c in self.chunker.chunk(text, **meta):
            chunk_meta = {**c.metadata, "source": source, "chunk_index": c.index}
            tokens = self.tokenizer.document(c.text, source) if self.tokenizer is not None else []
            chunks.append(IndexedChunk(f"{source}#{c.index}", c.text, source, chunk_meta, tokens))
        return PreparedDocument(source, checksum, chunks)

    def prepare_many(self, documents: Iterable[Mapping[str, Any]]) -> list[PreparedDocument]:
        """:meth:`prepare` for each dict (``text``, and optionally ``source``, ``checksum``,
        ``metadata`` and further metadata keys); the first bad one raises, naming it."""
        prepared: list[PreparedDocument] = []
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
                item = self.prepare(doc["text"], doc.get("source"), doc.get("checksum"), {**nested, **extra})
            except (TypeError, ValueError) as e:
                raise type(e)(f"document {i}: {e}") from e
            if item is not None:
                prepared.append(item)
        return prepared

    def add(
        self,
        docs: list[PreparedDocument],
        vectors: np.ndarray | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Embed the documents' chunks and build their BM25 segment (outside the lock, side
        by side: each runs while the other waits on numpy), then add them, replacing the
        chunks of sources indexed before; returns the number of chunks added. ``vectors``:
        the chunks' vectors, in order, when they are embedded already (one document per source).
        ``progress(n)``: told of the chunks as they are embedded, each embedder call (all of
        them at the end when nothing is embedded here)."""
        if not docs:
            return 0
        latest = {d.source: d for d in docs}  # within one batch, the last version of a source wins
        kept = [latest[d.source] is d for d in docs for _ in d.chunks]  # per chunk, as vectors' rows
        new = [c for d in docs if latest[d.source] is d for c in d.chunks]
        embedded = vectors is None and self.embedder is not None
        vectors, postings = self._embedded_with_segment(docs, new, vectors, progress)
        with self.lock:
            added_chunks = self._add_locked(docs, latest, kept, vectors, postings)
        if progress is not None and not embedded:
            progress(sum(len(d.chunks) for d in docs))
        return added_chunks

    def _add_locked(
        self,
        docs: list[PreparedDocument],
        latest: dict[str, PreparedDocument],
        kept: list[bool],
        vectors: np.ndarray | None,
        postings: Postings | None,
    ) -> int:
        """:meth:`add`'s part under the lock: the chunks of replaced sources dropped, the
        ``latest`` version of each source appended with its ``kept`` vectors and BM25
        ``postings``; the number of chunks added."""
        sources = self.sources
        for source in latest:
            self.touched.setdefault(source, source in sources)
        replaced = {s for s in latest if s in sources}
        if replaced:
            self._keep(self.chunks.positions_without(replaced))
        first = len(self.chunks)
        tail = self.chunks.tail
        for doc in docs:
            if latest[doc.source] is doc:
                tail.extend(doc.chunks)
                sources[doc.source] = doc.checksum
        if vectors is not None:
            self._append_vectors(vectors if all(kept) else vectors[np.asarray(kept, dtype=bool)])
        if postings is not None and self._lexical_built:
            self._lexical.append_postings(postings, first)
        return len(self.chunks) - first

    def _embedded_with_segment(
        self,
        docs: list[PreparedDocument],
        new: list[IndexedChunk],
        vectors: np.ndarray | None,
        progress: Callable[[int], Any] | None = None,
    ) -> tuple[np.ndarray | None, Postings | None]:
        """The vectors of every chunk of ``docs`` (``vectors`` when given; ``progress`` told
        of each embedder call's chunks) and the BM25 segment of the ``new`` ones (None
        without a tokenizer), built side by side."""
        segment = None
        with contextlib.ExitStack() as stack:
            if self.tokenizer is not None and new:
                pool = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="selfrag-bm25"))
                lexical = self._lexical
                segment = pool.submit(Postings.build, [c.tokens or [] for c in new], lexical.k1, lexical.b)
            if vectors is None:
                vectors = self._embed([c for d in docs for c in d.chunks], progress)
            postings = segment.result() if segment is not None else None
        return vectors, postings

    def _append_vectors(self, added: np.ndarray) -> None:
        """Add the vectors of the chunks added to the tail (under the lock), and to the
        tail's approximate index when it has one."""
        self._tail_vectors.append(added)
        tail_ann = self._anns.pop("tail", None)
        if tail_ann is not None:  # kept up to date; else decided again at the next search
            tail_ann.add(added)
            self._anns["tail"] = tail_ann

    def delete(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many were removed."""
        with self.lock:
            if source not in self.sources:
                return 0
            self.touched.setdefault(source, True)
            before = len(self.chunks)
            self._keep(self.chunks.positions_without({source}))
            del self.sources[source]
            return before - len(self.chunks)

    def changes(self) -> Changes:
        """The documents :attr:`touched` names that are still here (their chunks are the
        tail's: added since), and the deleted sources that were here when it was restored."""
        with self.lock:
            sources, tail = self.sources, self.chunks.tail
            rows: dict[str, list[int]] = {}
            for i, c in enumerate(tail):
                if c.source in self.touched:
                    rows.setdefault(c.source, []).append(i)
            docs = [PreparedDocument(s, sources[s], [tail[i] for i in r]) for s, r in rows.items()]
            if self.tokenizer is not None:
                for c in (c for d in docs for c in d.chunks if c.tokens is None):
                    c.tokens = self.tokenizer.document(c.text, c.source)
            order = [i for r in rows.values() for i in r]
            vectors = self._tail_matrix()[order] if self.embedder is not None and order else None
            deleted = [s for s, was_here in self.touched.items() if was_here and s not in sources]
            return Changes(docs, vectors, deleted)

    def merge(self, stored: StoredIndex) -> None:
        """Restore ``stored`` (a later save of the directory this index was restored from)
        and apply this index's :meth:`changes` over it: the documents it added or replaced
        replace theirs (their chunks, tokens and vectors moved, nothing embedded again), the
        sources it deleted are deleted. Refused by :meth:`restore` (another embedder), it
        leaves the index as it was."""
        with self.lock:
            changes = self.changes()
            self.restore(stored)
            for source in changes.deleted:
                self.delete(source)
            self.add(changes.docs, changes.vectors)

    def _keep(self, positions: np.ndarray) -> None:
        _ = self.sources  # decoded before the chunks leave the base
        in_base = self.chunks.in_base
        if self.embedder is not None and self._tail_vectors:
            tail = positions[positions >= in_base] - in_base
            if len(tail) < len(self._tail_matrix()):
                self._tail_vectors = [self._tail_matrix()[tail]]
                self._anns.pop("tail", None)  # its rows moved
        self.chunks = self.chunks.keep(positions)
        if self.tokenizer is not None and self._lexical_built:
            self._lexical.keep(positions)

    def _tail_matrix(self) -> np.ndarray:
        if len(self._tail_vectors) != 1:
            empty = np.zeros((0, self.dim or 1), np.float32)
            self._tail_vectors = [np.vstack(self._tail_vectors) if self._tail_vectors else empty]
        return self._tail_vectors[0]

    def vectors(self, positions: np.ndarray | None = None) -> np.ndarray:
        """The unit vectors of the chunks at ``positions`` (default: all, in order) as one
        matrix (call under the lock); an unchanged restored index's are its mapped array."""
        base, kept = self._base_vectors, self.chunks.kept
        tail = self._tail_matrix()
        if base is None:
            return tail if positions is None else tail[positions]
        if positions is None:
            if kept is None and not len(tail):
                return base
            return np.vstack((base if kept is None else base[kept], tail))
        in_base = self.chunks.in_base
        out = np.empty((len(positions), base.shape[1]), np.float32)
        mine = positions < in_base
        out[mine] = base[positions[mine] if kept is None else kept[positions[mine]]]
        out[~mine] = tail[positions[~mine] - in_base]
        return out

    def _embed(
        self, chunks: list[IndexedChunk], progress: Callable[[int], Any] | None = None
    ) -> np.ndarray | None:
        """The chunks' unit vectors, in order. They are embedded longest first, in calls of
        :func:`embed_step` texts, so that each of the embedder's own batches holds texts of
        about one length (a model pads a batch to its longest text) and ``progress(n)``
        hears of every call as it ends; the rows go back to the chunks' order."""
        if self.embedder is None or not chunks:
            return None
        texts = [c.text for c in chunks]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # stable: ties keep their order
        step = embed_step(self.embedder)
        matrix: np.ndarray | None = None
        for start in range(0, len(order), step):
            rows = order[start : start + step]
            part = as_matrix(self.embedder.embed_documents([texts[i] for i in rows]), len(rows))
            if matrix is None:
                matrix = np.empty((len(texts), part.shape[1]), np.float32)
            elif part.shape[1] != matrix.shape[1]:
                raise EmbedderMismatchError(
                    f"the embedder returned {part.shape[1]}-dimensional vectors after "
                    f"{matrix.shape[1]}-dimensional ones"
                )
            matrix[rows] = part
            if progress is not None:
                progress(len(rows))
        assert matrix is not None
        self.check_dim(matrix.shape[1])
        return matrix

    def check_dim(self, dim: int) -> None:
        if self.dim is None:
            self.dim = dim
        elif dim != self.dim:
            raise EmbedderMismatchError(
                f"the embedder returned {dim}-dimensional vectors but the index holds "
                f"{self.dim}-dimensional ones; use the embedder the index was built with"
            )

    # ------------------------------------------------------------------ scores

    @property
    def rebuilds(self) -> int:
        """How many times the BM25 index was rebuilt from every chunk's tokens (adding and
        deleting documents rebuild nothing: see :class:`LexicalIndex`)."""
        return self._lexical.rebuilds

    def rebuild_lexical(self, *, retokenize: bool = False) -> int:
        """Rebuild the BM25 index from every chunk now (re-tokenising each first when
        asked; the chunks of a restored index are tokenised here)."""
        tokenizer = self.tokenizer
        assert tokenizer is not None
        with self.lock:
            tokens = []
            for c in self.chunks:
                if retokenize or c.tokens is None:  # a base chunk's are dropped with it, after
                    c.tokens = tokenizer.document(c.text, c.source)
                tokens.append(c.tokens)
            self._lexical.build(tokens)
            self._lexical_built = True
            self.lexical_terms = tokenizer.identity
            return len(self.chunks)

    def _lexical_current(self) -> bool:
        """Bring the BM25 statistics up to the chunks when ``autorebuild`` says so (a
        refresh, or a rebuild for a restored index without BM25 arrays); whether they are
        current."""
        if not self._lexical_built:
            if not self.autorebuild:
                return False
            self.rebuild_lexical()
        if self._lexical.stale and self.autorebuild:
            self._lexical.refresh()
        return not self._lexical.stale

    def lexical_scores(self, query: str) -> np.ndarray:
        """BM25 scores of ``query``, one per chunk (call under the lock). Without
        ``autorebuild``, the statistics are those of the last rebuild: chunks added since
        score nothing, deleted ones are left out."""
        assert self.tokenizer is not None
        self._lexical_current()
        return self._lexical.scores(self.tokenizer.query(query), len(self.chunks))

    def name_scores(self, query: str) -> np.ndarray | None:
        """The part of :meth:`lexical_scores` that the chunks' file names give (the query's
        identifiers found in them), one per chunk; None when the query holds no identifier."""
        assert self.tokenizer is not None
        terms = self.tokenizer.names(query)
        if not terms:
            return None
        self._lexical_current()
        return self._lexical.scores(terms, len(self.chunks))

    def dense_scores(self, qvecs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Cosine scores, one column per row of ``qvecs``: a (chunks, queries) matrix, and
        which of them are exact (None: all). Vectors past :data:`~selfrag_core.store.ann.ANN_THRESHOLD`
        are searched through an approximate index: the best of its candidates, re-ranked
        exactly, are exact, and every other chunk gets the lowest score of the query (found
        the same way with the negated query), so a chunk it did not return ranks last on its
        dense score and hybrid scores keep their scale. Call under the lock."""
        if self.dim is not None and qvecs.shape[1] != self.dim and len(self.chunks):
            self.check_dim(qvecs.shape[1])
        tail_part = self._part_scores(self._tail_matrix(), self._ann("tail"), qvecs, None)
        if self._base_vectors is None:
            return tail_part
        parts = [self._part_scores(self._base_vectors, self._ann("base"), qvecs, self.chunks.kept), tail_part]
        (base, base_known), (tail, tail_known) = parts
        if base_known is None and tail_known is None:
            return np.vstack((base, tail)), None
        known = np.vstack(
            [np.ones_like(s, bool) if k is None else k for s, k in parts]
        )  # fmt: skip
        low = np.minimum(base.min(axis=0, initial=np.inf), tail.min(axis=0, initial=np.inf))
        scores = np.vstack((base, tail))
        np.copyto(scores, np.broadcast_to(low, scores.shape), where=~known)  # one floor for both parts
        return scores, known

    @staticmethod
    def _part_scores(
        matrix: np.ndarray, index: ann.ApproximateIndex | None, qvecs: np.ndarray, kept: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if index is None:
            exact = dot_scores(matrix, qvecs)
            return (exact if kept is None else exact[kept]), None
        # the queries and their negations in one pass over the codes: the best candidates,
        # and the lowest score (the best of the negated query, negated)
        both_ids, both = index.search_exact(np.vstack((qvecs, -qvecs)), ann.RERANK, matrix)
        ids, best, worst = both_ids[: len(qvecs)], both[: len(qvecs)], both[len(qvecs) :, 0]
        low = np.minimum(-worst, np.where(ids >= 0, best, np.inf).min(axis=1))
        scores = np.empty((len(matrix), len(qvecs)), np.float32)
        scores[:] = low
        known = np.zeros(scores.shape, bool)
        for column, (rows, values) in enumerate(zip(ids, best, strict=True)):
            found = rows >= 0
            scores[rows[found], column] = values[found]
            known[rows[found], column] = True
        if kept is not None:
            scores, known = scores[kept], known[kept]
        return scores, known

    def _ann(self, part: str) -> ann.ApproximateIndex | None:
        """The approximate index over the base's or the tail's vectors when they number
        :data:`~selfrag_core.store.ann.ANN_THRESHOLD` or more and faiss is installed (read
        from the saved base, or built, at the first dense search); None: they are scanned."""
        if part in self._anns:
            return self._anns[part]
        matrix = self._base_vectors if part == "base" else self._tail_matrix()
        found = None
        if matrix is not None and len(matrix) >= ann.ANN_THRESHOLD:
            saved = self.stored.ann if part == "base" and self.stored is not None else None
            if saved is not None:
                found = ann.ApproximateIndex.from_array(saved)
            elif ann.available():
                found = ann.ApproximateIndex.build(matrix)
            else:
                logger.warning(
                    "selfrag store: %d vectors are scanned one by one at every query; "
                    "pip install 'selfrag[ann]' for an approximate index", len(matrix),
                )  # fmt: skip
        self._anns[part] = found
        return found

    # ------------------------------------------------------------------ saving and restoring

    def identity(self) -> dict[str, Any] | None:
        """The embedder's name and dimension, as a saved index records them."""
        if self.embedder is None:
            return None
        return {"name": embedder_name(self.embedder), "dim": self.dim}

    def snapshot(self, delta_of: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What :func:`~selfrag_core.store.persist.save_index` takes (call under the
        lock): a :class:`~selfrag_core.store.persist.Delta` over the saved base when
        ``delta_of`` is its manifest (the directory it was restored from, saved with the
        same settings) and the changes since are small; else the whole index: the chunks,
        sources, vectors and BM25 index. BM25 changes are counted first (with
        ``autorebuild``), so loading rebuilds nothing."""
        if self.tokenizer is not None:
            self._lexical_current()
        built = self.tokenizer is not None and self._lexical_built
        chunks = self.chunks
        stored = self.stored
        if delta_of is not None and stored is not None and chunks.base is not None and self._small_delta():
            delta = self._delta(delta_of, stored, built)
            if delta is not None:
                return {"delta": delta}
        vectors = None
        approximate = None
        if self.embedder is not None and self.dim is not None:
            vectors = self.vectors()
            if len(vectors) >= ann.ANN_THRESHOLD and ann.available():
                approximate = self._whole_ann() or ann.ApproximateIndex.build(vectors)
        postings = self._lexical.postings() if built else None
        if chunks.base is not None and chunks.kept is None and not chunks.tail:
            columns = chunks.base.columns  # unchanged since restored: written as they are
        else:
            columns = _columns(chunks, self.sources)
        return {"columns": columns, "vectors": vectors, "postings": postings, "ann": approximate}

    def _delta(self, delta_of: Mapping[str, Any], stored: StoredIndex, built: bool) -> Delta | None:
        """The changes since the base was saved (``delta_of``, its manifest): the tail's
        chunks, vectors and BM25 postings, and the base's chunks deleted; None when the base
        and this index differ in keeping BM25 statistics (the whole index is saved)."""
        chunks = self.chunks
        assert chunks.base is not None
        tail = chunks.tail
        kept = np.arange(len(chunks.base)) if chunks.kept is None else chunks.kept
        deleted = np.setdiff1d(np.arange(len(chunks.base), dtype=np.int64), kept, assume_unique=True)
        if built != (stored.postings is not None):
            return None
        sources = self.sources
        columns = _columns(tail, {c.source: sources[c.source] for c in tail})
        postings = self._lexical.postings(chunks.in_base) if built else None
        vectors = self._tail_matrix() if VECTORS_FILE in delta_of["files"] else None
        return Delta(dict(delta_of), columns, vectors, postings, deleted)

    def _whole_ann(self) -> ann.ApproximateIndex | None:
        """An approximate index this index has over all its vectors in order, if any."""
        chunks = self.chunks
        if chunks.base is None:
            return self._anns.get("tail")
        if chunks.kept is None and not chunks.tail:
            return self._ann("base")
        return None

    def _small_delta(self) -> bool:
        chunks = self.chunks
        assert chunks.base is not None
        limit = max(self.DELTA_MIN, self.DELTA_SHARE * len(chunks.base))
        return len(chunks.tail) <= limit and len(chunks.base) - chunks.in_base <= limit

    def restore(self, stored: StoredIndex) -> None:
        """Replace the contents with a saved index's, once its embedder is checked to be
        this one; concurrent searches see the old or the new contents, never a mix."""
        self._check_embedder(stored)
        delta = stored.delta
        tail_columns = delta.columns if delta is not None else None
        tail = [] if tail_columns is None else list(StoredChunks(tail_columns))
        tail_sources = {} if tail_columns is None else tail_columns.source_dict()
        kept = None
        if stored.deleted is not None and len(stored.deleted):
            kept = np.setdiff1d(np.arange(len(stored), dtype=np.int64), stored.deleted, assume_unique=True)
        chunks, sources = _restored_chunks(stored, kept, tail)
        stemming = stored.manifest.get("tokenizer")
        postings = self._usable(stored.postings, stemming)
        tail_postings = None if delta is None else self._usable(delta.postings, stemming)
        vectors, tail_vectors = self._restored_vectors(stored)
        built = postings is not None and (delta is None or tail_postings is not None)
        lexical = self._restored_lexical(
            postings if built else None, kept, tail_postings, len(chunks) - len(tail)
        )
        with self.lock:
            self.chunks = chunks
            self._sources = sources
            self._tail_sources = tail_sources
            # the same base, reused by a reload: its approximate index stays as well
            same_base = self.stored is not None and vectors is not None and vectors is self._base_vectors
            base_ann = self._anns.get("base") if same_base else None
            self._base_vectors = vectors
            self._tail_vectors = tail_vectors
            self._anns = {} if base_ann is None else {"base": base_ann}
            self._lexical = lexical
            self._lexical_built = built
            if self.tokenizer is not None:
                self.lexical_terms = stemming if built else self.tokenizer.identity
            self.stored = stored if stored.columns is not None else None
            self.touched = {}

    def _check_embedder(self, stored: StoredIndex) -> None:
        """Raise EmbedderMismatchError unless the saved index was built with this index's
        embedder (by name, and by dimension where it recorded one), or both have none."""
        identity = stored.manifest.get("embedder")
        mine = self.identity()
        if identity and mine is None:
            raise EmbedderMismatchError(
                f"this index was built with the embedder {identity.get('name')!r}; pass it: embed=..."
            )
        if mine is not None and not identity and (len(stored) or stored.delta is not None):
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
                self.check_dim(dim)

    def _restored_vectors(self, stored: StoredIndex) -> tuple[np.ndarray | None, list[np.ndarray]]:
        """The saved vectors (none without an embedder): the base's matrix, and the tail's
        (a delta's, or formats 1 and 2's whole matrix)."""
        vectors = None
        tail_vectors = []
        if stored.vectors is not None and self.embedder is not None:
            self.check_dim(int(stored.vectors.shape[1]))
            if stored.columns is not None:
                vectors = stored.vectors
            else:
                tail_vectors = [stored.vectors]
        delta = stored.delta
        if delta is not None and delta.vectors is not None and self.embedder is not None:
            tail_vectors.append(delta.vectors)
        return vectors, tail_vectors

    def _restored_lexical(
        self, postings: Postings | None, kept: np.ndarray | None, tail_postings: Postings | None, tail_at: int
    ) -> LexicalIndex:
        """A BM25 index scoring as this one's, holding the saved statistics: the base's
        ``postings`` less the chunks deleted since (only ``kept`` stay), then the tail's from
        position ``tail_at``; empty when ``postings`` is None (rebuilt at the first search)."""
        lexical = LexicalIndex(self._lexical.k1, self._lexical.b)
        lexical.rebuilds = self._lexical.rebuilds
        if postings is not None:
            lexical.restore(postings)
            if kept is not None:
                lexical.keep(kept)
            if tail_postings is not None and len(tail_postings):
                lexical.append_postings(tail_postings, tail_at)
            lexical.refresh()
        return lexical

    def _usable(self, postings: Postings | None, stemming: Any) -> Postings | None:
        """A saved BM25 index, if this index tokenises and scores as it was built with (or
        stems so, and an older selfrag left out the identifier and file name terms: it is
        searched as it is, without them, until :meth:`rebuild_lexical`); else None: the
        statistics are rebuilt from the chunks at the first search."""
        if postings is None or self.tokenizer is None:
            return None
        lexical = self._lexical
        ours = (self.tokenizer.identity, self.tokenizer.stemming)
        if stemming in ours and (postings.k1, postings.b) == (lexical.k1, lexical.b):
            return postings
        logger.info(
            "selfrag store: the saved BM25 index was built with stemming %r, k1=%s, b=%s, not %r, "
            "k1=%s, b=%s: it is rebuilt at the first search",
            stemming, postings.k1, postings.b, self.tokenizer.stemming, lexical.k1, lexical.b,
        )  # fmt: skip
        return None

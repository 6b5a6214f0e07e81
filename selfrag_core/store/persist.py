"""Saving and loading an index directory: JSON and ``.npy`` only, written atomically.

Layout (format 4)::

    index_dir/
      manifest.json                # format name and version, settings, embedder, file checksums
      data-<hex>/store.json        # {"sources": the number of sources}
      data-<hex>/<column>.npy      # uint8: the column's strings, UTF-8, end to end
      data-<hex>/<column>_offsets.npy  # int64: where each string starts (one more than strings)
      data-<hex>/chunk_sources.npy # int32: each chunk's source (its position in "sources")
      data-<hex>/vectors.npy       # float32 (chunks, dim), only with an embedder
      data-<hex>/bm25.json         # BM25 parameters and terms (in column order), with BM25 on
      data-<hex>/bm25_tf.npy       # float32: each term's frequency in each document (CSC layout)
      data-<hex>/bm25_indices.npy  # int32: their document positions
      data-<hex>/bm25_indptr.npy   # int64: where each term's entries start
      data-<hex>/bm25_lengths.npy  # int32: each document's length in terms

The string columns are the chunks' ``ids``, ``texts`` and ``metadata`` (one JSON object
each) and the ``sources`` with their ``checksums``. Opening an index reads the manifest and
``store.json`` and memory-maps every array (read-only): nothing is tokenised, embedded,
rebuilt or decoded; a chunk's strings are decoded and its metadata parsed and checked
when it is read (:class:`StringColumn`, :class:`ChunkColumns`).

Formats 1 and 2 kept the chunks and sources in ``store.json`` (JSON records); indexes in
them still load (read whole, each record checked). Format 1 had no BM25 files either, and
formats 2 and 3 saved ``bm25s``'s scores instead of term frequencies (scores cannot be
updated when documents are added): in all three the BM25 index is rebuilt from the chunks
at the first search, once.
The next save writes the current format.

A save writes a fresh ``data-<hex>`` directory (under a temporary name, renamed when
complete), then replaces ``manifest.json`` with ``os.replace``, the single atomic step: a
crash at any point leaves the previous index loadable. Older data directories are removed
afterwards.

Writers of one directory (processes, threads, ``selfrag index`` beside ``selfrag serve``)
take turns: a save holds :func:`index_lock` (an exclusive ``flock`` on ``index_dir/.lock``)
from its data directory to its cleanup, and a writer that finds a newer index than the one
it loaded applies its own changes over it (:meth:`~selfrag_core.store.rag.RAG.save`). As
every writer writes under the lock, the cleanup removes whatever the new manifest does not
name (replaced data, a crashed save's leftovers): no other save can be in progress then.
Readers take no lock: a load that loses its files to a save committed meanwhile reads that
save's index instead. Without ``fcntl`` (Windows) the lock is a no-op: one writer at a time.

Loading only reads: every manifest field is checked (type, range, file names
plain and inside the index) before any data file is opened, then the checksums (see
:data:`VERIFY_LIMIT`), the chunk records of formats 1 and 2, every array's ``.npy`` header,
shape and size, and the values of the arrays that index others (offsets, positions).
Arrays are mapped with ``allow_pickle=False``. A missing, corrupt or foreign directory
raises :class:`IndexFormatError` (never an exception of ``json``, ``numpy`` or the file
system) and touches nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import math
import os
import re
import reprlib
import shutil
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard, TypeVar, overload

if sys.platform != "win32":
    import fcntl

import numpy as np

from selfrag_core.errors import ConfigurationError, RAGSystemError
from selfrag_core.parsing import load_json
from selfrag_core.store.chunking import CHUNKERS, Chunker
from selfrag_core.store.config import is_weight
from selfrag_core.store.dense import HashingEmbeddings
from selfrag_core.store.lexical import Postings
from selfrag_core.store.rerank import make_reranker

FORMAT = "selfrag-store"
FORMAT_VERSION = 4
MANIFEST = "manifest.json"
LOCK_FILE = ".lock"  # what writers lock (see index_lock); never part of the index
STORE_FILE = "store.json"
VECTORS_FILE = "vectors.npy"
BM25_FILE = "bm25.json"
BM25_TF, BM25_INDICES, BM25_INDPTR = "bm25_tf.npy", "bm25_indices.npy", "bm25_indptr.npy"
BM25_LENGTHS = "bm25_lengths.npy"
ANN_FILE = "ann.npy"  # uint8: an approximate index of the vectors (faiss's serialisation), when many
BM25_FILES = (BM25_FILE, BM25_TF, BM25_INDICES, BM25_INDPTR, BM25_LENGTHS)
#: formats 2 and 3 saved bm25s's scores: read as "rebuild at the first search"
OLD_BM25_FILES = (BM25_FILE, "bm25_data.npy", BM25_INDICES, BM25_INDPTR)
#: the string columns of format 3: the chunks' (one string per chunk), then the sources'
CHUNK_COLUMNS, SOURCE_COLUMNS = ("ids", "texts", "metadata"), ("sources", "checksums")
CHUNK_SOURCES = "chunk_sources.npy"
COLUMN_FILES = (
    *(f"{c}{suffix}.npy" for c in CHUNK_COLUMNS + SOURCE_COLUMNS for suffix in ("", "_offsets")),
    CHUNK_SOURCES,
)
#: the data files each format version may list
FILES = {
    1: (STORE_FILE, VECTORS_FILE),
    2: (STORE_FILE, VECTORS_FILE, *OLD_BM25_FILES),
    3: (STORE_FILE, *COLUMN_FILES, VECTORS_FILE, *OLD_BM25_FILES),
    4: (STORE_FILE, *COLUMN_FILES, VECTORS_FILE, *BM25_FILES, ANN_FILE),
}
#: the data files each format version must list
REQUIRED = {
    1: (STORE_FILE,),
    2: (STORE_FILE,),
    3: (STORE_FILE, *COLUMN_FILES),
    4: (STORE_FILE, *COLUMN_FILES),
}
#: a delta's data directory: the chunks added since the base was saved, and the base's deleted ones
DELETED_FILE = "deleted.npy"
DELTA_FILES = (*(name for name in FILES[4] if name != ANN_FILE), DELETED_FILE)
DELTA_REQUIRED = (*REQUIRED[4], DELETED_FILE)


T = TypeVar("T")


class IndexFormatError(RAGSystemError):
    """An index directory is missing, corrupt, foreign, or from an incompatible version."""


class EmbedderMismatchError(IndexFormatError):
    """The index was built with a different embedder (name or dimension) than the one given."""


class IndexConflictError(IndexFormatError):
    """Another writer saved an index this one's changes cannot be applied over (rebuilt with
    another embedder) since it was loaded; nothing was written."""


class LazySequence(Sequence[T]):
    """A sequence whose items are made by :meth:`_at` (a position in range) when asked for."""

    __slots__ = ()

    def _at(self, i: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(len(self)))]
        size = len(self)
        if not -size <= i < size:
            raise IndexError(f"position {i} of {size}")
        return self._at(i % size)

    def __iter__(self) -> Iterator[T]:
        for i in range(len(self)):
            yield self._at(i)


class StringColumn(LazySequence[str]):
    """Strings stored end to end as one UTF-8 byte array (``blob``, memory-mapped when
    loaded) with ``offsets`` (int64, one more than the strings): string ``i`` is
    ``blob[offsets[i]:offsets[i + 1]]``, decoded when it is read. ``where``: the file
    the strings were read from, named when one is not UTF-8."""

    __slots__ = ("blob", "offsets", "where")

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, where: Path | None = None) -> None:
        # plain views of a mapping (np.memmap's own indexing is Python code: slow per string)
        self.blob = blob.view(np.ndarray)
        self.offsets = offsets.view(np.ndarray)
        self.where = where

    @classmethod
    def of(cls, strings: Iterable[str]) -> StringColumn:
        encoded = [s.encode("utf-8") for s in strings]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, count=len(encoded)), out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _at(self, i: int) -> str:
        start, end = self.offsets[i : i + 2].tolist()
        raw = self.blob[start:end].tobytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise IndexFormatError(f"{self.where}: string {i} is not UTF-8 ({e}); {_FIX}") from e


@dataclass(frozen=True)
class ChunkColumns:
    """The chunks and sources of an index, column-wise (format 3): what a save writes and
    a load maps. Chunk ``i`` is ``ids[i]``, ``texts[i]``, ``metadata[i]`` (a JSON object:
    :meth:`metadata_at` parses and checks it) and the source ``sources[chunk_sources[i]]``,
    whose checksum is ``checksums[chunk_sources[i]]``."""

    ids: StringColumn
    texts: StringColumn
    metadata: StringColumn
    chunk_sources: np.ndarray  # int32
    sources: StringColumn
    checksums: StringColumn

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        texts: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
        chunk_sources: Sequence[str],
        sources: Mapping[str, str],
    ) -> ChunkColumns:
        names = list(sources)
        position = {name: i for i, name in enumerate(names)}
        codes = np.fromiter((position[s] for s in chunk_sources), np.int32, count=len(chunk_sources))
        return cls(
            StringColumn.of(ids),
            StringColumn.of(texts),
            StringColumn.of(json.dumps(m, ensure_ascii=False) for m in metadata),
            codes,
            StringColumn.of(names),
            StringColumn.of(sources[name] for name in names),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def metadata_at(self, i: int) -> dict[str, Any]:
        text = self.metadata[i]
        try:
            value = load_json(text)
        except ValueError as e:
            raise IndexFormatError(
                f"{self.metadata.where}: chunk {i}'s metadata is not JSON ({e}); {_FIX}"
            ) from e
        if type(value) is not dict:
            raise _invalid(Path(str(self.metadata.where)), f"chunks[{i}].metadata", value, "an object")
        return value

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunk_sources", self.chunk_sources.view(np.ndarray))

    def source_of(self, i: int) -> str:
        return self.sources[int(self.chunk_sources[i])]

    def source_dict(self, codes: np.ndarray | None = None) -> dict[str, str]:
        """The sources (those at ``codes``, default all) and their checksums, decoded (once
        the index is changed or asked)."""
        if codes is None:
            names = list(self.sources)
            sources = dict(zip(names, self.checksums, strict=True))
        else:
            names = [self.sources[int(i)] for i in codes]
            sources = {name: self.checksums[int(i)] for name, i in zip(names, codes, strict=True)}
        if len(sources) != len(names):
            raise IndexFormatError(f"{self.sources.where} names a source twice; {_FIX}")
        return sources


@dataclass
class StoredIndex:
    manifest: dict[str, Any]
    chunks: list[dict[str, Any]]  # formats 1 and 2 (empty from format 3 on)
    sources: dict[str, str]  # formats 1 and 2 (empty from format 3 on)
    vectors: np.ndarray | None  # memory-mapped
    postings: Postings | None  # memory-mapped; None: rebuild BM25 from the chunks
    columns: ChunkColumns | None = None  # from format 3 on: the chunks and sources, memory-mapped
    delta: StoredIndex | None = None  # the chunks added since this base was saved
    ann: np.ndarray | None = None  # uint8, memory-mapped: the vectors' approximate index, serialised
    deleted: np.ndarray | None = None  # with a delta: the base's chunks deleted since (positions)
    version: tuple[int, int, int] | None = None  # the manifest's manifest_version when it was read

    def __len__(self) -> int:
        """The base's chunks (deleted ones included; the delta's apart)."""
        return len(self.columns) if self.columns is not None else len(self.chunks)


@dataclass(frozen=True)
class Delta:
    """What a save writes when the index was loaded from a base saved in the same place:
    the chunks added since, in order, and the base positions deleted since."""

    base: dict[str, Any]  # the base's manifest entries: data, files, chunks
    columns: ChunkColumns
    vectors: np.ndarray | None
    postings: Postings | None
    deleted: np.ndarray  # int64, ascending


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # platforms without directory fds
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_file(path: Path, data: bytes | np.ndarray) -> None:
    """``data`` (bytes, or an array as ``.npy``) written to ``path`` and synced."""
    with path.open("wb") as f:
        if isinstance(data, bytes):
            f.write(data)
        else:
            np.save(f, np.ascontiguousarray(data), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def _write_postings(data: Path, postings: Postings) -> None:
    params = {"k1": postings.k1, "b": postings.b, "terms": postings.terms()}
    _write_file(data / BM25_FILE, json.dumps(params, ensure_ascii=False).encode("utf-8"))
    _write_file(data / BM25_TF, postings.tf.astype(np.float32, copy=False))
    _write_file(data / BM25_INDICES, postings.indices.astype(np.int32, copy=False))
    _write_file(data / BM25_INDPTR, postings.indptr.astype(np.int64, copy=False))
    _write_file(data / BM25_LENGTHS, postings.lengths.astype(np.int32, copy=False))


def _write_columns(data: Path, columns: ChunkColumns) -> None:
    for name in CHUNK_COLUMNS + SOURCE_COLUMNS:
        column: StringColumn = getattr(columns, name)
        _write_file(data / f"{name}.npy", column.blob.astype(np.uint8, copy=False))
        _write_file(data / f"{name}_offsets.npy", column.offsets.astype(np.int64, copy=False))
    _write_file(data / CHUNK_SOURCES, columns.chunk_sources.astype(np.int32, copy=False))
    store = {"sources": len(columns.sources)}
    _write_file(data / STORE_FILE, json.dumps(store).encode("utf-8"))


def _read_json(path: Path) -> Any:
    try:
        return load_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: load_json's, UnicodeDecodeError
        raise IndexFormatError(f"{path} is unreadable or not JSON ({e}); restore it or re-index") from e


def _read_manifest(root: Path) -> dict[str, Any]:
    """The manifest, checked only as far as "ours, and a version we read" (what save needs)."""
    path = root / MANIFEST
    if not path.is_file():
        raise IndexFormatError(
            f"{root} is not a selfrag index (no {MANIFEST}); index documents and save() there first, "
            "or point to the directory a RAG was saved to"
        )
    manifest = _read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexFormatError(
            f"{path} belongs to something else (not a JSON object with format {FORMAT!r}); "
            "point to a directory a selfrag RAG was saved to"
        )
    version = manifest.get("format_version")
    if not _is_int(version) or version < 1:
        raise _invalid(path, "format_version", version, f"an integer from 1 to {FORMAT_VERSION}")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{root} was written by a newer selfrag (format {version}, this one reads up to "
            f"{FORMAT_VERSION}); upgrade selfrag"
        )
    return manifest


# ----------------------------------------------------------------------------- validation


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_FIX = "the index is damaged or was not written by selfrag: re-index the documents"


def _invalid(where: Path, field: str, value: Any, expected: str) -> IndexFormatError:
    return IndexFormatError(f"{where}: {field} is {reprlib.repr(value)}, expected {expected}; {_FIX}")


def _plain_name(where: Path, field: str, name: Any) -> str:
    """A file name that can only mean a file directly inside its directory."""
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\:\x00"):
        raise _invalid(where, field, name, "a plain file name (no path separators, '..', ':' or NUL)")
    return name


def _inside(root: Path, name: str) -> Path:
    """``root/name``, refused when it resolves outside ``root`` (through a link)."""
    path = root / name
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        inside = False
    if not inside:
        raise IndexFormatError(f"{path} points outside the index {root}; re-index the documents")
    return path


#: the saved RAG settings: key -> (test, what is expected)
_SETTINGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "bm25_alpha": (is_weight, "a number in [0, 1]"),
    "bm25_autorebuild": (lambda v: isinstance(v, bool), "true or false"),
    "stemmer": (lambda v: v in ("auto", "pystemmer", None), '"auto", "pystemmer" or null'),
    "chunker": (lambda v: isinstance(v, str) and v in CHUNKERS, f"one of {list(CHUNKERS)}"),
    "chunk_size": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "chunk_overlap": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "reranker": (lambda v: isinstance(v, str), "a reranker name"),
}
_OPTIONAL_SETTINGS = ("reranker",)
_MANIFEST_KEYS = ("format", "format_version", "data", "files", "chunks", "embedder", "tokenizer", "settings")
_DATA_KEYS = ("data", "files", "chunks")  # a data directory's entries in the manifest
_DELTA_KEYS = (*_DATA_KEYS, "deleted")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_keys(
    where: Path, field: str, obj: Any, required: Iterable[str], optional: Iterable[str] = ()
) -> None:
    """``obj`` is a JSON object with every ``required`` field and no unknown one."""
    required = set(required)
    if not isinstance(obj, dict):
        raise _invalid(where, field, obj, f"an object with the fields {sorted(required)}")
    missing, unknown = sorted(required - obj.keys()), sorted(obj.keys() - required - set(optional))
    if missing or unknown:
        problem = f"lacks the fields {missing}" if missing else f"has unknown fields {unknown}"
        raise IndexFormatError(f"{where}: {field} {problem}; {_FIX}")


def _check_data(
    where: Path, prefix: str, section: dict[str, Any], known: Sequence[str], required: Sequence[str]
) -> None:
    """A data directory's entries (its name, its files and their checksums, its chunks)."""
    data = _plain_name(where, f"{prefix}data", section["data"])
    if not data.startswith("data-"):
        raise _invalid(where, f"{prefix}data", data, "a data directory name (data-...)")
    files = section["files"]
    if not isinstance(files, dict) or STORE_FILE not in files:
        raise _invalid(
            where, f"{prefix}files", files, f"an object mapping {list(required)} (and more) to checksums"
        )
    for name, digest in files.items():
        _plain_name(where, f"a name in {prefix}files", name)
        if name not in known:
            raise _invalid(where, f"a name in {prefix}files", name, f"one of {list(known)}")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _invalid(where, f"{prefix}files[{name!r}]", digest, "a SHA-256 hex digest")
    if not set(required) <= files.keys():
        raise _invalid(where, f"{prefix}files", sorted(files), f"a list with all of {list(required)}")
    if not _is_int(section["chunks"]) or section["chunks"] < 0:
        raise _invalid(where, f"{prefix}chunks", section["chunks"], "an integer >= 0")


def _check_manifest(manifest: dict[str, Any], where: Path) -> None:
    """Every field of a manifest :func:`_read_manifest` accepted: types, ranges, file names."""
    version = manifest["format_version"]
    _check_keys(where, "the manifest", manifest, _MANIFEST_KEYS, ("delta",) if version >= 4 else ())
    _check_data(where, "", manifest, FILES[version], REQUIRED[version])
    files = manifest["files"]
    if manifest.get("delta") is not None:
        _check_delta(manifest, where)
    embedder = manifest["embedder"]
    if embedder is not None:
        _check_keys(where, "embedder", embedder, ("name", "dim"))
        if not isinstance(embedder["name"], str) or not embedder["name"]:
            raise _invalid(where, "embedder.name", embedder["name"], "a non-empty string")
        if embedder["dim"] is not None and not (_is_int(embedder["dim"]) and embedder["dim"] > 0):
            raise _invalid(where, "embedder.dim", embedder["dim"], "a positive integer or null")
    has_vectors = embedder is not None and (embedder["dim"] is not None or manifest["chunks"] > 0)
    if (VECTORS_FILE in files) != has_vectors:
        raise _invalid(
            where, "files", sorted(files), f"{VECTORS_FILE} listed exactly when an embedder was used"
        )
    if manifest["tokenizer"] is not None and not isinstance(manifest["tokenizer"], str):
        raise _invalid(where, "tokenizer", manifest["tokenizer"], "a string or null")
    bm25_files = BM25_FILES if manifest["format_version"] >= 4 else OLD_BM25_FILES
    bm25 = [name for name in bm25_files if name in files]
    if bm25 and (len(bm25) < len(bm25_files) or manifest["tokenizer"] is None):
        raise _invalid(
            where, "files", sorted(files), f"all of {list(bm25_files)} or none, and none without a tokenizer"
        )
    _check_settings(manifest, where)


def _check_delta(manifest: dict[str, Any], where: Path) -> None:
    """A manifest's delta: its fields, another data directory than the base's, a count of
    deleted chunks within the base's, and the vectors and BM25 files the base has."""
    files, delta = manifest["files"], manifest["delta"]
    _check_keys(where, "delta", delta, _DELTA_KEYS)
    _check_data(where, "delta.", delta, DELTA_FILES, DELTA_REQUIRED)
    if delta["data"] == manifest["data"]:
        raise _invalid(where, "delta.data", delta["data"], "another directory than the base's")
    deleted = delta["deleted"]
    if not _is_int(deleted) or not 0 <= deleted <= manifest["chunks"]:
        raise _invalid(where, "delta.deleted", deleted, f"an integer from 0 to {manifest['chunks']}")
    if (VECTORS_FILE in files) != (VECTORS_FILE in delta["files"]):
        raise _invalid(where, "delta.files", sorted(delta["files"]), f"{VECTORS_FILE} as in the base's")
    if any((name in files) != (name in delta["files"]) for name in BM25_FILES):
        raise _invalid(where, "delta.files", sorted(delta["files"]), "the BM25 files as in the base's")


def _check_settings(manifest: dict[str, Any], where: Path) -> None:
    """A manifest's settings: their keys and types, the values the RAG accepts, and no
    weight for the vectors of an index without an embedder."""
    settings = manifest["settings"]
    _check_keys(where, "settings", settings, set(_SETTINGS) - set(_OPTIONAL_SETTINGS), _OPTIONAL_SETTINGS)
    for key, value in settings.items():
        test, expected = _SETTINGS[key]
        if not test(value):
            raise _invalid(where, f"settings.{key}", value, expected)
    try:  # the values the RAG would refuse (chunk_size < 20, an unknown reranker...)
        Chunker(settings["chunker"], settings["chunk_size"], settings["chunk_overlap"])
        make_reranker(settings.get("reranker"))
    except ConfigurationError as e:
        raise IndexFormatError(f"{where}: settings are invalid ({e}); {_FIX}") from e
    if manifest["embedder"] is None and settings["bm25_alpha"] > 0:
        raise _invalid(
            where, "settings.bm25_alpha", settings["bm25_alpha"], "0 in an index without an embedder"
        )


def _check_store(
    raw: Any, where: Path, manifest: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    _check_keys(where, "the store", raw, ("chunks", "sources"))
    chunks, sources = raw["chunks"], raw["sources"]
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise _invalid(where, "sources", sources, "an object mapping each source to its checksum string")
    if not isinstance(chunks, list):
        raise _invalid(where, "chunks", chunks, "a list of chunks")
    if len(chunks) != manifest["chunks"]:
        raise IndexFormatError(
            f"{where} holds {len(chunks)} chunks but the manifest counts {manifest['chunks']}; {_FIX}"
        )
    for i, chunk in enumerate(chunks):
        if not _plain_chunk(chunk, sources):
            _check_chunk(where, i, chunk, sources)
    return chunks, sources


_CHUNK_KEYS = frozenset(("id", "text", "source", "metadata"))


def _plain_chunk(chunk: Any, sources: dict[str, str]) -> bool:
    """Whether a chunk record is well-formed: the quick test of every record (``json``
    makes exact types), before :func:`_check_chunk` names what is wrong with one."""
    return (
        type(chunk) is dict
        and chunk.keys() == _CHUNK_KEYS
        and type(chunk["id"]) is str
        and type(chunk["text"]) is str
        and type(chunk["metadata"]) is dict
        and type(chunk["source"]) is str
        and chunk["source"] in sources
    )


def _check_chunk(where: Path, i: int, chunk: Any, sources: dict[str, str]) -> None:
    _check_keys(where, f"chunks[{i}]", chunk, _CHUNK_KEYS)
    for key, kind in (("id", str), ("text", str), ("source", str), ("metadata", dict)):
        if not isinstance(chunk[key], kind):
            raise _invalid(
                where, f"chunks[{i}].{key}", chunk[key], "a string" if kind is str else "an object"
            )
    if chunk["source"] not in sources:
        raise _invalid(where, f"chunks[{i}].source", chunk["source"], "a source listed in sources")


def _map_array(
    path: Path, dtype: type[np.generic], shape_ok: Callable[[tuple[int, ...]], bool], expected: str
) -> np.ndarray:
    """A ``.npy`` array of ``dtype`` (in either byte order) and a shape ``shape_ok``
    accepts (``expected`` describes it), memory-mapped read-only without pickle, once
    its header promised exactly the bytes the file holds. One saved in another byte
    order or in Fortran order is read into memory, converted."""
    want = np.dtype(dtype)
    try:
        with path.open("rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, found = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, found = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            if found.kind != want.kind or found.itemsize != want.itemsize:
                raise ValueError(f"dtype {found}, not {want}")
            if not shape_ok(shape):
                raise ValueError(f"shape {shape}, not {expected}")
            size = math.prod(shape) * want.itemsize
            if os.fstat(f.fileno()).st_size - f.tell() != size:
                raise ValueError(f"the data is not the {size} bytes its header announces (truncated?)")
        array: np.ndarray = (
            np.load(path, mmap_mode="r", allow_pickle=False) if size else np.zeros(shape, want)
        )
    except (OSError, ValueError, EOFError) as e:
        raise IndexFormatError(f"{path} is not a numeric array as selfrag saves them ({e}); {_FIX}") from e
    if array.dtype != want or not array.flags.c_contiguous:
        return np.ascontiguousarray(array, dtype=want)
    return array


def _finite(array: np.ndarray) -> bool:
    """Whether every value is finite, checked a block at a time (no full-size temporary)."""
    flat = array.reshape(-1)
    step = 1 << 22
    return all(bool(np.isfinite(flat[i : i + step]).all()) for i in range(0, flat.size, step))


def _read_vectors(path: Path, rows: int, dim: int | None) -> np.ndarray:
    """The float32 ``(rows, dim)`` unit vectors, memory-mapped."""
    vectors = _map_array(
        path, np.float32,
        lambda s: len(s) == 2 and s[0] == rows and s[1] > 0 and dim in (None, s[1]),
        f"({rows}, {dim or 'dim'}) for {rows} chunks",
    )  # fmt: skip
    if not _finite(vectors):
        raise IndexFormatError(f"{path} holds NaN or infinite values; {_FIX}")
    return vectors


def _read_postings(files: Mapping[str, Path], chunks: int) -> Postings:
    """The saved BM25 index over ``chunks`` documents, its arrays memory-mapped, checked
    down to the values that index other arrays (term offsets, document positions)."""
    where = files[BM25_FILE]
    params = _read_json(where)
    _check_keys(where, "the BM25 parameters", params, ("k1", "b", "terms"))
    for key in ("k1", "b"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise _invalid(where, key, value, "a number >= 0")
    terms = params["terms"]
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
        raise _invalid(where, "terms", terms, "a list of strings")
    vocab = {term: column for column, term in enumerate(terms)}
    if len(vocab) != len(terms):
        raise _invalid(where, "terms", terms, "a list of distinct strings")
    tf, indices, indptr, lengths = _read_postings_arrays(files, len(terms), chunks)
    return Postings(vocab, tf, indices, indptr, lengths, params["k1"], params["b"])


def _read_postings_arrays(
    files: Mapping[str, Path], columns: int, chunks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The BM25 index's term frequencies, document positions, term offsets and document
    lengths over ``columns`` terms and ``chunks`` documents, memory-mapped and checked."""
    indptr = _map_array(files[BM25_INDPTR], np.int64, lambda s: s == (columns + 1,), f"({columns + 1},)")
    if indptr[0] != 0 or (columns and bool((np.diff(indptr) < 0).any())):
        raise IndexFormatError(f"{files[BM25_INDPTR]} holds offsets that are not ascending from 0; {_FIX}")
    entries = int(indptr[-1])
    tf = _map_array(files[BM25_TF], np.float32, lambda s: s == (entries,), f"({entries},)")
    if entries and not (_finite(tf) and float(tf.min()) >= 1):
        raise IndexFormatError(f"{files[BM25_TF]} holds term frequencies below 1, NaN or infinite; {_FIX}")
    indices = _map_array(files[BM25_INDICES], np.int32, lambda s: s == (entries,), f"({entries},)")
    if entries and (int(indices.min()) < 0 or int(indices.max()) >= chunks):
        raise IndexFormatError(
            f"{files[BM25_INDICES]} holds document positions outside the {chunks} chunks; {_FIX}"
        )
    lengths = _map_array(files[BM25_LENGTHS], np.int32, lambda s: s == (chunks,), f"({chunks},)")
    if chunks and int(lengths.min()) < 0:
        raise IndexFormatError(f"{files[BM25_LENGTHS]} holds negative document lengths; {_FIX}")
    # plain views of the mappings: np.memmap's slicing and arithmetic run Python code at each
    # call, and a term's postings are sliced at every query
    tf, indices, indptr, lengths = (a.view(np.ndarray) for a in (tf, indices, indptr, lengths))
    return tf, indices, indptr, lengths


def _read_strings(files: Mapping[str, Path], name: str, count: int) -> StringColumn:
    """A string column of ``count`` strings: its offsets checked as a whole, vectorised
    (ascending from 0 to the end of the blob); each string is decoded when it is read."""
    blob_path, offsets_path = files[f"{name}.npy"], files[f"{name}_offsets.npy"]
    blob = _map_array(blob_path, np.uint8, lambda s: len(s) == 1, "(bytes,)")
    offsets = _map_array(offsets_path, np.int64, lambda s: s == (count + 1,), f"({count + 1},)")
    if int(offsets[0]) != 0 or int(offsets[-1]) != len(blob) or bool((np.diff(offsets) < 0).any()):
        raise IndexFormatError(
            f"{offsets_path} holds offsets that are not ascending from 0 to the {len(blob)} bytes "
            f"of {blob_path.name}; {_FIX}"
        )
    return StringColumn(blob, offsets, blob_path)


def _read_columns(files: Mapping[str, Path], manifest: dict[str, Any]) -> ChunkColumns:
    where = files[STORE_FILE]
    store = _read_json(where)
    _check_keys(where, "the store", store, ("sources",))
    count = store["sources"]
    if not _is_int(count) or count < 0:
        raise _invalid(where, "sources", count, "an integer >= 0")
    rows = manifest["chunks"]
    ids, texts, metadata = (_read_strings(files, name, rows) for name in CHUNK_COLUMNS)
    sources, checksums = (_read_strings(files, name, count) for name in SOURCE_COLUMNS)
    codes = _map_array(files[CHUNK_SOURCES], np.int32, lambda s: s == (rows,), f"({rows},)")
    if rows and (int(codes.min()) < 0 or int(codes.max()) >= count):
        raise IndexFormatError(
            f"{files[CHUNK_SOURCES]} holds source positions outside the {count} sources; {_FIX}"
        )
    return ChunkColumns(ids, texts, metadata, codes, sources, checksums)


#: files larger than this are checked by their structure when an index is opened and by
#: their checksum only when asked (``verify=True``): hashing the gigabytes of a million
#: chunks takes longer than the rest of opening them
VERIFY_LIMIT = 64 * 2**20


def _read_data(root: Path, manifest: dict[str, Any], verify: bool) -> StoredIndex:
    """The data directory ``manifest`` names (the base's, or the delta's entries laid over
    the manifest), its checksums verified (see :data:`VERIFY_LIMIT`) and its arrays mapped."""
    data = _inside(root, manifest["data"])  # names are plain (checked): this guards against links
    files = {name: _inside(data, name) for name in manifest["files"]}
    for name, file in files.items():
        if not file.is_file():
            raise IndexFormatError(f"{file} is missing: the index is incomplete; re-index the documents")
        try:
            if not verify and file.stat().st_size > VERIFY_LIMIT:
                continue
            digest = _sha256(file)
        except OSError as e:
            raise IndexFormatError(f"{file} cannot be read ({e}); check its permissions or re-index") from e
        if digest != manifest["files"][name]:
            raise IndexFormatError(f"{file} is corrupt (checksum mismatch); re-index the documents")
    columns: ChunkColumns | None = None
    chunks: list[dict[str, Any]] = []
    sources: dict[str, str] = {}
    if manifest["format_version"] >= 3:
        columns = _read_columns(files, manifest)
    else:
        chunks, sources = _check_store(_read_json(files[STORE_FILE]), files[STORE_FILE], manifest)
    rows = manifest["chunks"]
    vectors = None
    if VECTORS_FILE in files:
        embedder = manifest["embedder"]
        vectors = _read_vectors(files[VECTORS_FILE], rows, embedder["dim"])
    # formats 2 and 3 saved scores, not term frequencies: rebuilt at the first search
    postings = _read_postings(files, rows) if BM25_FILE in files and manifest["format_version"] >= 4 else None
    stored = StoredIndex(manifest, chunks, sources, vectors, postings, columns)
    if ANN_FILE in files:
        if VECTORS_FILE not in files:
            raise _invalid(files[ANN_FILE].parent, "files", sorted(files), f"{ANN_FILE} only beside vectors")
        stored.ann = _map_array(files[ANN_FILE], np.uint8, lambda s: len(s) == 1 and s[0] > 0, "(bytes,)")
    if DELETED_FILE in files:
        stored.deleted = _map_array(files[DELETED_FILE], np.int64, lambda s: len(s) == 1, "(positions,)")
    return stored


#: how many times a load starts again when a save committed while it read (and removed
#: files the manifest it read named)
LOAD_ATTEMPTS = 5


def load_index(
    path: str | os.PathLike[str], reuse: StoredIndex | None = None, *, verify: bool = False
) -> StoredIndex:
    """Read an index directory written by :func:`save_index` (read-only). Every field of
    the manifest is checked before any data file is opened; every problem, down to a
    truncated array, is an :class:`IndexFormatError` naming the file and the field. A
    problem met while another process replaced the manifest is that save's doing: the
    load starts again, reading the new index (up to :data:`LOAD_ATTEMPTS` times). The load
    holds the readers' lock (a shared ``flock``), so a save of this version of the library
    never replaces its files while it reads.

    ``reuse``: an index loaded from the same directory before; when the base it was
    saved on is still the base (a later save wrote a delta), its mapped arrays are taken
    as they are and only the delta is read. ``verify``: check the checksum of every file,
    also those over :data:`VERIFY_LIMIT` (whose structure alone is checked otherwise)."""
    root = Path(path)
    if not root.is_dir():
        raise IndexFormatError(f"no index directory at {root}; check the path or build the index first")
    attempts = LOAD_ATTEMPTS
    while True:
        version = manifest_version(root)
        try:
            with _reading(root):
                stored = _load(root, reuse, verify)
        except IndexFormatError:
            attempts -= 1
            if not attempts or manifest_version(root) in (None, version):
                raise
            continue
        stored.version = version
        return stored


def _load(root: Path, reuse: StoredIndex | None, verify: bool) -> StoredIndex:
    manifest = _read_manifest(root)
    _check_manifest(manifest, root / MANIFEST)
    if reuse is not None and all(reuse.manifest.get(k) == manifest.get(k) for k in _DATA_KEYS):
        stored = dataclasses.replace(reuse, manifest=manifest, delta=None, deleted=None)
    else:
        stored = _read_data(root, manifest, verify)
    delta = manifest.get("delta")
    if delta is not None:
        stored.delta = _read_data(root, {**manifest, **delta}, verify)
        deleted = stored.delta.deleted
        assert deleted is not None  # a required file of a delta
        where = root / delta["data"] / DELETED_FILE
        if len(deleted) != delta["deleted"]:
            raise IndexFormatError(f"{where} holds {len(deleted)} positions, not {delta['deleted']}; {_FIX}")
        if len(deleted) and (
            int(deleted[0]) < 0 or int(deleted[-1]) >= len(stored) or bool((np.diff(deleted) <= 0).any())
        ):
            raise IndexFormatError(
                f"{where} holds positions that are not ascending within the {len(stored)} chunks; {_FIX}"
            )
        stored.deleted = deleted
    return stored


def _write_data(root: Path, write: Callable[[Path], None]) -> tuple[str, dict[str, str]]:
    """A new data directory: written under a temporary name by ``write``, synced, renamed
    when complete; its name and its files' checksums."""
    data = f"data-{uuid.uuid4().hex}"
    tmp = root / f"{data}.tmp"
    tmp.mkdir()
    try:
        write(tmp)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir())}
        _fsync_dir(tmp)
        os.replace(tmp, root / data)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data, files


def _write_part(
    columns: ChunkColumns,
    vectors: np.ndarray | None,
    postings: Postings | None,
    ann: Any = None,
    deleted: np.ndarray | None = None,
) -> Callable[[Path], None]:
    def write(data: Path) -> None:
        _write_columns(data, columns)
        if vectors is not None:
            _write_file(data / VECTORS_FILE, vectors.astype(np.float32, copy=False))
            if ann is not None:
                _write_file(data / ANN_FILE, ann.to_array())
        if postings is not None:
            _write_postings(data, postings)
        if deleted is not None:
            _write_file(data / DELETED_FILE, deleted.astype(np.int64, copy=False))

    return write


def _check_target(root: Path, *, locked: bool = True) -> None:
    """Refuse to write into ``root`` unless it is new, empty, or a selfrag index. Not
    ``locked`` (before the writers' lock is taken), a directory holding the lock file but
    no manifest yet passes: another writer's first save is under way, and the check runs
    again under the lock."""
    if root.exists() and not root.is_dir():
        raise IndexFormatError(f"{root} is a file, not an index directory; choose another path")
    if (root / MANIFEST).exists():
        _read_manifest(root)  # never replace something that is not ours
    elif root.is_dir() and any(p.name != LOCK_FILE for p in root.iterdir()):
        if not locked and (root / LOCK_FILE).exists():
            return
        raise IndexFormatError(
            f"{root} is a non-empty directory that is not a selfrag index; refusing to write into it. "
            "Choose a new or empty directory."
        )


@contextlib.contextmanager
def index_lock(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the writers' lock of the index directory ``path`` for the block: an exclusive
    ``flock`` on its :data:`LOCK_FILE`, released however the block ends (and by the system
    when the process dies). The directory is checked first (new, empty, or a selfrag index:
    else :class:`IndexFormatError`, and nothing is created) and created if missing. Every
    save holds it (:meth:`~selfrag_core.store.rag.RAG.save`); it is not re-entrant: a save
    inside the block waits for it. Without ``fcntl`` (Windows) nothing is locked."""
    root = Path(path)
    _check_target(root, locked=False)
    root.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":  # pragma: no cover - one writer at a time there
        yield root
        return
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    held = _HELD.set(_HELD.get() | {os.path.realpath(root)})
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _check_target(root)  # again, with no writer's save half done (a first save's data, no manifest yet)
        yield root
    finally:
        _HELD.reset(held)
        os.close(fd)  # releases the lock


#: the index directories whose writers' lock this thread (context) holds: a load inside a
#: save reads without the readers' lock (flock would wait on itself)
_HELD: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "selfrag_index_locks", default=frozenset()
)


@contextlib.contextmanager
def _reading(root: Path) -> Iterator[None]:
    """A shared ``flock`` on the index's :data:`LOCK_FILE` for a load: no save can replace
    the files being read, and a save waits for the loads under way. None where there is
    no lock file (an index no writer of this version saved, a read-only copy) or no
    ``fcntl``, and inside a save of this directory (its lock is held already)."""
    if sys.platform == "win32" or os.path.realpath(root) in _HELD.get():  # pragma: no cover - win32
        yield
        return
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def generation(manifest: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    """Which index a manifest commits: its data directories (a save that changes anything
    names a new one, never reused), or None for no manifest."""
    if manifest is None:
        return None
    delta = manifest.get("delta")
    return manifest.get("data"), delta.get("data") if isinstance(delta, dict) else None


def committed(path: str | os.PathLike[str]) -> tuple[Any, Any] | None:
    """The :func:`generation` of the index saved at ``path`` now (None: none is)."""
    root = Path(path)
    return generation(_read_manifest(root)) if (root / MANIFEST).exists() else None


def save_index(
    path: str | os.PathLike[str],
    *,
    settings: dict[str, Any],
    columns: ChunkColumns | None = None,
    vectors: np.ndarray | None = None,
    postings: Postings | None = None,
    ann: Any = None,
    delta: Delta | None = None,
) -> dict[str, Any]:
    """Write the index to ``path`` atomically (see the module docstring): the whole of it
    (``columns``, ``vectors``, ``postings``: the BM25 index over the chunks, in their
    order; None: loading rebuilds it; ``ann``: an approximate index of the vectors, an
    :class:`~selfrag_core.store.ann.ApproximateIndex`), or a ``delta`` over the base saved
    there; returns the manifest written. Call it holding :func:`index_lock` on ``path``:
    its cleanup removes every data directory the new manifest does not name."""
    root = Path(path)
    _check_target(root)
    root.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    committed = False
    try:
        if delta is None:
            assert columns is not None
            data, files = _write_data(root, _write_part(columns, vectors, postings, ann))
            written.append(data)
            entries: dict[str, Any] = {"data": data, "files": files, "chunks": len(columns)}
        else:
            entries = {key: delta.base[key] for key in _DATA_KEYS}
            if len(delta.columns) or len(delta.deleted):
                part = _write_part(delta.columns, delta.vectors, delta.postings, deleted=delta.deleted)
                data, files = _write_data(root, part)
                written.append(data)
                entries["delta"] = {
                    "data": data, "files": files, "chunks": len(delta.columns), "deleted": len(delta.deleted)
                }  # fmt: skip
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **entries, **settings}
        manifest_tmp = root / f"{MANIFEST}.{uuid.uuid4().hex}.tmp"
        _write_file(manifest_tmp, json.dumps(manifest, indent=2, ensure_ascii=False).encode("utf-8"))
        os.replace(manifest_tmp, root / MANIFEST)
        committed = True
        _fsync_dir(root)
    except BaseException:
        if committed:
            raise
        for data in written:
            shutil.rmtree(root / data, ignore_errors=True)
        for stale in root.glob(f"{MANIFEST}.*.tmp"):
            stale.unlink(missing_ok=True)
        raise
    # replaced data and leftovers of crashed saves: under the lock, no other save is under way
    keep = generation(manifest) or ()
    for stale in root.iterdir():
        if stale.name.startswith("data-") and stale.name not in keep:
            shutil.rmtree(stale, ignore_errors=True)
        elif stale.name.startswith(f"{MANIFEST}.") and stale.name.endswith(".tmp"):
            stale.unlink(missing_ok=True)
    return manifest


def manifest_version(root: Path) -> tuple[int, int, int] | None:
    """What changes when an index is saved (the manifest is replaced atomically), or None."""
    try:
        st = os.stat(root / MANIFEST)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def embedder_from_identity(identity: Mapping[str, Any]) -> Any:
    """The embedder a saved index names, when it is the built-in one (recreated from its
    name); else :class:`EmbedderMismatchError`: the caller must pass it."""
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

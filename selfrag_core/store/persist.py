"""Saving and loading an index directory: JSON and ``.npy`` only, written atomically.

Layout::

    index_dir/
      manifest.json           # format name and version, settings, embedder, file checksums
      data-<hex>/store.json   # chunks (id, text, source, metadata) and source checksums
      data-<hex>/vectors.npy  # float32 (chunks, dim), only with an embedder

A save writes a fresh ``data-<hex>`` directory (under a temporary name, renamed when
complete), then replaces ``manifest.json`` with ``os.replace``: the manifest switch is
the single atomic step, so a crash at any point leaves the previous index loadable.
Older data directories are removed afterwards. Loading only reads; a missing,
corrupt or foreign directory raises :class:`IndexFormatError` and touches nothing.
Arrays are loaded with ``allow_pickle=False``; nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.errors import RAGSystemError

FORMAT = "selfrag-store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STORE_FILE = "store.json"
VECTORS_FILE = "vectors.npy"


class IndexFormatError(RAGSystemError):
    """An index directory is missing, corrupt, foreign, or from an incompatible version."""


class EmbedderMismatchError(IndexFormatError):
    """The index was built with a different embedder (name or dimension) than the one given."""


@dataclass
class StoredIndex:
    manifest: dict[str, Any]
    chunks: list[dict[str, Any]]
    sources: dict[str, str]
    vectors: np.ndarray | None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_bytes(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_vectors(path: Path, vectors: np.ndarray) -> None:
    with path.open("wb") as f:
        np.save(f, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.is_file():
        raise IndexFormatError(
            f"{root} is not a selfrag index (no {MANIFEST}); index documents and save() there first, "
            "or point to the directory a RAG was saved to"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IndexFormatError(f"{path} is unreadable or not JSON ({e}); restore it or re-index") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexFormatError(f"{path} belongs to something else (format is not {FORMAT!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise IndexFormatError(f"{path} has no valid format_version; re-index the documents")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{root} was written by a newer selfrag (format {version}, this one reads up to "
            f"{FORMAT_VERSION}); upgrade selfrag"
        )
    return manifest


def _check_chunks(raw: Any, where: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    ok = (
        isinstance(raw, dict) and isinstance(raw.get("chunks"), list) and isinstance(raw.get("sources"), dict)
    )
    if ok:
        for c in raw["chunks"]:
            fields_ok = isinstance(c, dict) and all(
                isinstance(c.get(k), str) for k in ("id", "text", "source")
            )
            if not fields_ok or not isinstance(c.get("metadata"), dict):
                ok = False
                break
    if not ok:
        raise IndexFormatError(f"{where} does not hold selfrag chunks; re-index the documents")
    return raw["chunks"], {str(k): str(v) for k, v in raw["sources"].items()}


def load_index(path: str | os.PathLike[str]) -> StoredIndex:
    """Read an index directory written by :func:`save_index` (read-only)."""
    root = Path(path)
    if not root.is_dir():
        raise IndexFormatError(f"no index directory at {root}; check the path or build the index first")
    manifest = _read_manifest(root)
    data = manifest.get("data")
    files = manifest.get("files")
    if not isinstance(data, str) or "/" in data or "\\" in data or not data.startswith("data-"):
        raise IndexFormatError(f"{root / MANIFEST} names no valid data directory; re-index the documents")
    if not isinstance(files, dict) or STORE_FILE not in files:
        raise IndexFormatError(f"{root / MANIFEST} lists no data files; re-index the documents")
    for name, digest in files.items():
        file = root / data / str(name)
        if not file.is_file():
            raise IndexFormatError(f"{file} is missing: the index is incomplete; re-index the documents")
        if _sha256(file) != digest:
            raise IndexFormatError(f"{file} is corrupt (checksum mismatch); re-index the documents")
    store_path = root / data / STORE_FILE
    try:
        raw = json.loads(store_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IndexFormatError(f"{store_path} is not valid JSON ({e}); re-index the documents") from e
    chunks, sources = _check_chunks(raw, store_path)
    vectors = None
    if VECTORS_FILE in files:
        try:
            vectors = np.load(root / data / VECTORS_FILE, allow_pickle=False)
        except ValueError as e:
            raise IndexFormatError(f"{root / data / VECTORS_FILE} is not a numeric array ({e})") from e
        if vectors.ndim != 2 or vectors.shape[0] != len(chunks) or vectors.dtype != np.float32:
            raise IndexFormatError(
                f"{root / data / VECTORS_FILE} has shape {vectors.shape} ({vectors.dtype}) for "
                f"{len(chunks)} chunks; re-index the documents"
            )
    return StoredIndex(manifest, chunks, sources, vectors)


def save_index(
    path: str | os.PathLike[str],
    *,
    settings: dict[str, Any],
    chunks: list[dict[str, Any]],
    sources: dict[str, str],
    vectors: np.ndarray | None,
) -> None:
    """Write the index to ``path`` atomically (see the module docstring)."""
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise IndexFormatError(f"{root} is a file, not an index directory; choose another path")
    if root.is_dir() and not (root / MANIFEST).exists() and any(root.iterdir()):
        raise IndexFormatError(
            f"{root} is a non-empty directory that is not a selfrag index; refusing to write into it. "
            "Choose a new or empty directory."
        )
    if (root / MANIFEST).exists():
        _read_manifest(root)  # never replace something that is not ours
    root.mkdir(parents=True, exist_ok=True)
    data = f"data-{uuid.uuid4().hex}"
    tmp = root / f"{data}.tmp"
    tmp.mkdir()
    committed = False
    try:
        payload = json.dumps({"chunks": chunks, "sources": sources}, ensure_ascii=False).encode("utf-8")
        _write_bytes(tmp / STORE_FILE, payload)
        if vectors is not None:
            _write_vectors(tmp / VECTORS_FILE, vectors)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir())}
        _fsync_dir(tmp)
        os.replace(tmp, root / data)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "data": data,
            "files": files,
            "chunks": len(chunks),
            **settings,
        }
        manifest_tmp = root / f"{MANIFEST}.{data}.tmp"
        _write_bytes(manifest_tmp, json.dumps(manifest, indent=2, ensure_ascii=False).encode("utf-8"))
        os.replace(manifest_tmp, root / MANIFEST)
        committed = True
        _fsync_dir(root)
    except BaseException:
        if committed:
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root / data, ignore_errors=True)
        (root / f"{MANIFEST}.{data}.tmp").unlink(missing_ok=True)
        raise
    for stale in root.iterdir():  # older data and leftovers of interrupted saves
        if stale.name.startswith("data-") and stale.name != data:
            shutil.rmtree(stale, ignore_errors=True)
        elif stale.name.startswith(f"{MANIFEST}.") and stale.name.endswith(".tmp"):
            stale.unlink(missing_ok=True)

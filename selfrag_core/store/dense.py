"""Dense search helpers: vector normalisation, embedder identity, and a test embedder.

Any object with ``embed_documents(texts)`` and ``embed_query(text)`` (see
``selfrag_core.protocols.Embeddings``) plugs in; vectors are L2-normalised and
searched exactly with one matrix-vector product.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import numpy as np

_WORD = re.compile(r"(?u)\w+")


def as_matrix(raw: Any, rows: int) -> np.ndarray:
    """An embedder's output as a float32 (rows, dim) matrix of unit-length rows."""
    matrix = np.asarray(raw, dtype=np.float32)
    if matrix.ndim == 1 and rows == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or matrix.shape[0] != rows or matrix.shape[1] == 0:
        raise ValueError(
            f"the embedder returned an array of shape {matrix.shape} for {rows} text(s); "
            "expected one non-empty vector per text"
        )
    if not np.isfinite(matrix).all():
        raise ValueError("the embedder returned NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0.0, 1.0, norms)


def embedder_name(embedder: Any) -> str:
    """A stable name for an embedder: its ``name`` / ``model_name`` attribute, else its class."""
    for attr in ("name", "model_name"):
        value = getattr(embedder, attr, None)
        if isinstance(value, str) and value:
            return value
    cls = type(embedder)
    return f"{cls.__module__}.{cls.__qualname__}"


class HashingEmbeddings:
    """Deterministic, dependency-free embeddings for tests and offline demos.

    Signed feature hashing (CRC32) of lower-cased words and character n-grams
    (``ngram_range``, on words padded with spaces), L2-normalised. Texts that share
    words and word pieces get similar vectors; there is no semantics beyond that.
    The same text always gives the same vector, in every process.
    """

    def __init__(self, dim: int = 256, ngram_range: tuple[int, int] = (3, 4)) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
            raise ValueError(f"dim must be an int >= 8, got {dim!r}")
        low, high = ngram_range
        if not 1 <= low <= high:
            raise ValueError(f"ngram_range must be (low, high) with 1 <= low <= high, got {ngram_range!r}")
        self.dim = dim
        self.ngram_range = (low, high)
        self.name = f"selfrag-hashing-v1-{dim}-{low}{high}"

    def _features(self, text: str) -> list[str]:
        feats: list[str] = []
        low, high = self.ngram_range
        for word in _WORD.findall(text.casefold()):
            feats.append("w:" + word)
            padded = f" {word} "
            for n in range(low, high + 1):
                feats.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
        return feats

    def _embed(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        feats = self._features(text)
        if not feats:
            return vec
        hashes = np.fromiter(
            (zlib.crc32(f.encode("utf-8")) for f in feats), dtype=np.uint64, count=len(feats)
        )
        signs = np.where((hashes >> np.uint64(31)) & np.uint64(1), -1.0, 1.0).astype(np.float32)
        np.add.at(vec, (hashes % np.uint64(self.dim)).astype(np.int64), signs)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._embed(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed(text)

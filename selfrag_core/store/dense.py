"""Dense search helpers: vector normalisation, embedder identity, and a test embedder.

Any object with ``embed_documents(texts)`` and ``embed_query(text)`` (see
``selfrag_core.protocols.Embeddings``) plugs in; vectors are L2-normalised and
searched exactly with one matrix-vector product.
"""

from __future__ import annotations

import functools
import re
import zlib
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError
from selfrag_core.validation import check_int

_WORD = re.compile(r"(?u)\w+")


def _word_features(word: str, low: int, high: int) -> list[str]:
    """A word's hashing features: the word itself and the character n-grams of " word "."""
    padded = f" {word} "
    feats = ["w:" + word]
    for n in range(low, high + 1):
        feats.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
    return feats


@functools.lru_cache(maxsize=1 << 14)  # a few MB at most
def _hashed_word(word: str, dim: int, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """(slots, signs) of a word's features under signed CRC32 feature hashing."""
    hashes = np.array([zlib.crc32(f.encode("utf-8")) for f in _word_features(word, low, high)], np.uint64)
    signs = np.where((hashes >> np.uint64(31)) & np.uint64(1), -1.0, 1.0)
    return (hashes % np.uint64(dim)).astype(np.int64), signs


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


def resolve_embedder(embed: Any) -> Any:
    """The embedder ``RAG(embed=...)`` means: None (lexical only), ``"hashing"``
    (:class:`HashingEmbeddings`) or an object with ``embed_documents`` and ``embed_query``."""
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
        check_int("dim", dim, 8)
        low, high = ngram_range
        if not 1 <= low <= high:
            raise ValueError(f"ngram_range must be (low, high) with 1 <= low <= high, got {ngram_range!r}")
        self.dim = dim
        self.ngram_range = (low, high)
        self.name = f"selfrag-hashing-v1-{dim}-{low}{high}"

    def _features(self, text: str) -> list[str]:
        feats: list[str] = []
        for word in _WORD.findall(text.casefold()):
            feats.extend(_word_features(word, *self.ngram_range))
        return feats

    def _embed(self, text: str) -> np.ndarray:
        words = _WORD.findall(text.casefold())
        if not words:
            return np.zeros(self.dim, dtype=np.float32)
        low, high = self.ngram_range
        hashed = [_hashed_word(w, self.dim, low, high) for w in words]  # memoised per word
        slots = np.concatenate([h[0] for h in hashed])
        signs = np.concatenate([h[1] for h in hashed])
        # sums of +-1 are exact in any order: the same vector as adding feature by feature
        vec = np.bincount(slots, weights=signs, minlength=self.dim).astype(np.float32)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._embed(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed(text)

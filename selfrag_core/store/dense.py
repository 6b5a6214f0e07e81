"""Dense search helpers: vector normalisation, embedder identity, and a test embedder.

Any object with ``embed_documents(texts)`` and ``embed_query(text)`` (see
``selfrag_core.protocols.Embeddings``) plugs in; vectors are L2-normalised and
searched exactly with one matrix-vector product.
"""

from __future__ import annotations

import re
import threading
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


def _hashed_features(features: list[str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(slots, signs) of features under signed CRC32 feature hashing."""
    hashes = np.array([zlib.crc32(f.encode("utf-8")) for f in features], np.uint64)
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
        self._lock = threading.Lock()
        self._forget()

    #: distinct words whose vectors are kept (``4 * dim`` bytes each), then forgotten
    WORD_LIMIT = 200_000
    #: texts summed in one matrix product (their distinct words make its inner size)
    _BATCH = 32

    def _forget(self) -> None:
        self._word_rows: dict[str, int] = {}  # word -> its row in the word vectors
        self._words = np.zeros((1024, self.dim), np.float32)  # each word's features, summed

    def _rows(self, words: list[str]) -> np.ndarray:
        """Each word's row in the word vectors (new words hashed and added first)."""
        rows = self._word_rows
        found = list(map(rows.get, words))
        if None in found:
            new = [w for w in dict.fromkeys(words) if w not in rows]
            if len(rows) + len(new) > self.WORD_LIMIT:
                self._forget()
                return self._rows(words)
            needed = len(rows) + len(new)
            if needed > len(self._words):
                grown = np.zeros((max(needed, 2 * len(self._words)), self.dim), np.float32)
                grown[: len(rows)] = self._words[: len(rows)]
                self._words = grown
            low, high = self.ngram_range
            for word in new:
                slots, signs = _hashed_features(_word_features(word, low, high), self.dim)
                self._words[len(rows)] = np.bincount(slots, weights=signs, minlength=self.dim)
                rows[word] = len(rows)
            found = list(map(rows.get, words))
        return np.array(found, np.int64)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._embed([text])[0]
        return vector

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries' vectors in one call (what the store's batched searches use)."""
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors: each word's hashed features are summed once into a word
        vector and kept; a batch of texts is then one product of its (texts x words) counts
        with those vectors. Every value is a small integer until the normalisation, so
        the sums are exact in any order: the same bits as adding feature by feature."""
        out = np.zeros((len(texts), self.dim), np.float32)
        for first in range(0, len(texts), self._BATCH):
            batch = texts[first : first + self._BATCH]
            words = [_WORD.findall(t.casefold()) for t in batch]
            with self._lock:  # embedders are called from several threads at once
                rows = self._rows([w for ws in words for w in ws])
                distinct, column = np.unique(rows, return_inverse=True)
                vectors = self._words[distinct]
            text = np.repeat(np.arange(len(batch), dtype=np.int64), [len(ws) for ws in words])
            counts = np.bincount(text * len(distinct) + column, minlength=len(batch) * len(distinct))
            # einsum, not a BLAS product: BLAS threads spinning on busy cores were 10x slower
            out[first : first + len(batch)] = np.einsum(
                "ij,jk->ik", counts.reshape(len(batch), -1).astype(np.float32), vectors
            )
        squares = np.einsum("ij,ij->i", out, out)
        if squares.max(initial=0) < 2**24:  # exact: each row's norm is the one of its own
            norms = np.sqrt(squares)
        else:
            norms = np.array([np.linalg.norm(row) for row in out], np.float32)
        np.divide(out, norms[:, None], out=out, where=norms[:, None] > 0)
        return out

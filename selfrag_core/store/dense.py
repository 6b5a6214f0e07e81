"""Dense search helpers: vector normalisation, embedder identity, and a test embedder.

Any object with ``embed_documents(texts)`` and ``embed_query(text)`` (see
``selfrag_core.protocols.Embeddings``) plugs in; vectors are L2-normalised and
searched exactly with one matrix-vector product.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import zlib
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError
from selfrag_core.validation import check_int

_WORD = re.compile(r"(?u)\w+")
#: every ASCII character that is not a word character, to a space
_ASCII_SPACES = str.maketrans({c: " " for c in map(chr, range(128)) if not _WORD.match(c)})


def _words(text: str) -> list[str]:
    """The lower-cased words of ``text``: ``_WORD.findall``, twice as fast on ASCII text."""
    text = text.casefold()
    return text.translate(_ASCII_SPACES).split() if text.isascii() else _WORD.findall(text)


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


def _room(array: np.ndarray, size: int) -> np.ndarray:
    """``array``, or a copy twice as long when it holds fewer than ``size`` items."""
    if size <= len(array):
        return array
    grown = np.zeros(max(size, 2 * len(array)), array.dtype)
    grown[: len(array)] = array
    return grown


_VECDOT = getattr(np, "vecdot", None)  # numpy 2


def dot_scores(matrix: np.ndarray, qvecs: np.ndarray) -> np.ndarray:
    """The (rows, queries) dot products of ``matrix``'s rows with ``qvecs``'s, read where
    the matrix lies (memory-mapped: never copied) on one core: BLAS spread over busy cores
    was slower, and ``vecdot``'s one dot product a row about twice as fast as ``einsum``."""
    if _VECDOT is not None:
        scores: np.ndarray = _VECDOT(matrix[:, None, :], qvecs)
        return scores
    scores = np.einsum("ij,kj->ik", matrix, qvecs)
    return scores


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
    # the squared norms summed as np.linalg.norm sums them (the same bits, fewer calls); a
    # NaN or an infinity makes its row's sum one too, so the values are checked only then
    squares = np.add.reduce(matrix * matrix, axis=1, keepdims=True)
    low, high = (squares.item(),) * 2 if rows == 1 else (squares.min(), squares.max())
    if low > 0.0 and high < math.inf:  # every row finite and not zero
        unit: np.ndarray = matrix / np.sqrt(squares)
        return unit
    if not np.isfinite(matrix).all():
        raise ValueError("the embedder returned NaN or infinite values")
    norms = np.sqrt(squares)
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

    #: distinct words whose features are kept (about 12 of them for a word of 6 letters)
    WORD_LIMIT = 200_000
    #: words of the texts counted in one pass (bounds the memory of a large call)
    _PASS_WORDS = 1 << 16

    def _forget(self) -> None:
        self._word_rows: dict[str, int] = {}  # word -> its row
        # row r's features are slots[starts[r]:starts[r + 1]] (and their signs); the
        # arrays have room to spare and are written only past their used part, or copied
        # when they grow, so a reader holding them keeps valid rows
        self._starts = np.zeros(1024, np.int64)
        self._slots = np.zeros(16_384, np.int64)
        self._signs = np.zeros(16_384, np.float64)

    def _rows(self, words: list[str]) -> np.ndarray:
        """Each word's row (new words' features hashed and appended first)."""
        rows = self._word_rows
        try:
            return np.fromiter(map(rows.__getitem__, words), np.int64, len(words))
        except KeyError:
            pass
        new = [w for w in dict.fromkeys(words) if w not in rows]
        if rows and len(rows) + len(new) > self.WORD_LIMIT:  # one call may pass the limit
            self._forget()
            return self._rows(words)
        low, high = self.ngram_range
        features = [_word_features(w, low, high) for w in new]
        slots, signs = _hashed_features([f for fs in features for f in fs], self.dim)
        first, used = len(rows), int(self._starts[len(rows)])
        end = used + len(slots)
        self._starts = _room(self._starts, first + len(new) + 1)
        self._slots, self._signs = _room(self._slots, end), _room(self._signs, end)
        self._starts[first + 1 : first + len(new) + 1] = used + np.cumsum([len(fs) for fs in features])
        self._slots[used:end], self._signs[used:end] = slots, signs
        rows.update(zip(new, range(first, first + len(new)), strict=True))
        return np.fromiter(map(rows.__getitem__, words), np.int64, len(words))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._embed([text])[0]
        return vector

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries' vectors in one call (what the store's batched searches use)."""
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors: each word's features are hashed once and kept; a text's
        vector counts the signed features of its words (one ``bincount`` a pass over many
        texts). Every value is a small integer until the normalisation, so the sums are
        exact in any order: the same bits as adding feature by feature."""
        out = np.zeros((len(texts), self.dim), np.float32)
        done = 0
        while done < len(texts):
            words: list[list[str]] = []
            total = 0
            while done + len(words) < len(texts) and total < self._PASS_WORDS:
                words.append(_words(texts[done + len(words)]))
                total += len(words[-1])
            with self._lock:  # embedders are called from several threads at once
                rows = self._rows(list(itertools.chain.from_iterable(words)))
                starts, slots, signs = self._starts, self._slots, self._signs
            first, sizes = starts[rows], starts[rows + 1] - starts[rows]
            ends = np.cumsum(sizes)
            feature = np.repeat(first - ends + sizes, sizes) + np.arange(ends[-1] if total else 0)
            text = np.repeat(np.arange(len(words), dtype=np.int64), [len(ws) for ws in words])
            cell = np.repeat(text * self.dim, sizes) + slots[feature]
            counts = np.bincount(cell, weights=signs[feature], minlength=len(words) * self.dim)
            out[done : done + len(words)] = counts.reshape(len(words), self.dim)
            done += len(words)
        squares = np.einsum("ij,ij->i", out, out)
        if squares.max(initial=0) < 2**24:  # exact: each row's norm is the one of its own
            norms = np.sqrt(squares)
        else:
            norms = np.array([np.linalg.norm(row) for row in out], np.float32)
        np.divide(out, norms[:, None], out=out, where=norms[:, None] > 0)
        return out

"""One selfrag embedder behind a framework's embeddings interface: what the LangChain
(``SelfRAGEmbeddings``) and LlamaIndex (``SelfRAGEmbedding``) adapters wrap. Here, above
both the store (``HashingEmbeddings``) and the local models (``LocalEmbeddings``), which
never import each other."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.local.embeddings import EMBEDDINGS_HINT, LocalEmbeddings, embeddings_available
from selfrag_core.store.dense import resolve_embedder

__all__ = ["EMBEDDER_NAMES", "SharedEmbedder"]

#: the embedder names the framework adapters take: MiniLM (the default) and hashing
EMBEDDER_NAMES = ("minilm", "hashing")


class SharedEmbedder:
    """``embedder``: an object with ``embed_documents`` and ``embed_query``
    (``LocalEmbeddings()``, ``HashingEmbeddings()``, yours), ``"minilm"`` or ``"hashing"``;
    None means MiniLM, checked now and loaded on the first call. Vectors come back as lists
    of Python floats; calls are serialised (one model, one caller at a time). Raises
    MissingDependencyError when MiniLM is wanted but not installed, ConfigurationError for
    another name, TypeError for a non-embedder. ``owner`` names the wrapper in messages."""

    def __init__(self, embedder: Any = None, *, owner: str = "SharedEmbedder") -> None:
        self._embedder = _resolve(embedder, owner)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The embedder's name (MiniLM's before it loads)."""
        if self._embedder is None:
            return LocalEmbeddings.name
        name = getattr(self._embedder, "name", None)
        return name if isinstance(name, str) and name else type(self._embedder).__name__

    @property
    def batch_size(self) -> int | None:
        """The embedder's ``batch_size`` (MiniLM's default before it loads), if it has one."""
        size = 32 if self._embedder is None else getattr(self._embedder, "batch_size", None)
        return size if isinstance(size, int) and size > 0 else None

    @property
    def embedder(self) -> Any:
        """The wrapped embedder (the first use of the default loads MiniLM)."""
        with self._lock:
            return self._loaded()

    def _loaded(self) -> Any:  # the caller holds the lock
        if self._embedder is None:
            self._embedder = LocalEmbeddings()
        return self._embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a list of strings; use embed_query for one text")
        texts = list(texts)
        if not texts:
            return []
        with self._lock:
            vectors = self._loaded().embed_documents(texts)
        return _rows(vectors, len(texts))

    def embed_query(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise TypeError(f"embed_query takes a string, got {type(text).__name__}")
        with self._lock:
            vector = self._loaded().embed_query(text)
        return _rows([vector], 1)[0]


def _resolve(embedder: Any, owner: str) -> Any:
    """The embedder to wrap, or None for MiniLM (see :class:`SharedEmbedder`)."""
    if embedder is None or embedder == "minilm":
        if not embeddings_available():
            raise MissingDependencyError(
                f"the default embedder is the local MiniLM, which is not installed: {EMBEDDINGS_HINT}; "
                f"or pass {owner}('hashing') or any embedder object"
            )
        return None
    if isinstance(embedder, str) and embedder != "hashing":
        raise ConfigurationError(
            f"unknown embedder name {embedder!r}; use one of {', '.join(EMBEDDER_NAMES)} or pass an "
            "object with embed_documents(texts) and embed_query(text)"
        )
    return resolve_embedder(embedder)  # "hashing", or an object checked to be an embedder


def _rows(vectors: Any, count: int) -> list[list[float]]:
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != count:
        raise ValueError(f"the embedder returned an array of shape {matrix.shape} for {count} text(s)")
    rows: list[list[float]] = matrix.tolist()
    return rows

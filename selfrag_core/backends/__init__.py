"""External backends the CLI and the server can run on instead of the embedded index
(``--backend``): :class:`~selfrag_core.backends.chroma.ChromaBackend`, a Chroma server
over HTTP. Vendor clients are imported on first use, with an install hint, so importing
this package needs none of them.

An application package, like ``store``: it may use the library and the store's parts
(its chunker, its embedders), and the library never imports it (pyproject's
import-linter contracts).

A public package: the adapters import from it (its ``__all__``), never from a module
under it. :class:`SharedEmbedder` (one selfrag embedder, MiniLM or hashing, behind a
framework's embeddings interface) and :data:`EMBEDDER_NAMES` are what the LangChain and
LlamaIndex embeddings wrap; they load on first use (the local models' modules), so the
CLI's ``--backend`` does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from selfrag_core.backends.chroma import ChromaBackend

if TYPE_CHECKING:
    from selfrag_core.backends.embedders import EMBEDDER_NAMES, SharedEmbedder

_LAZY = {
    "EMBEDDER_NAMES": "selfrag_core.backends.embedders",
    "SharedEmbedder": "selfrag_core.backends.embedders",
}

__all__ = ["EMBEDDER_NAMES", "ChromaBackend", "SharedEmbedder"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'selfrag_core.backends' has no attribute {name!r}")

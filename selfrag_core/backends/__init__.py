"""External backends the CLI and the server can run on instead of the embedded index
(``--backend``): :class:`~selfrag_core.backends.chroma.ChromaBackend`, a Chroma server
over HTTP. Vendor clients are imported on first use, with an install hint, so importing
this package needs none of them.

An application package, like ``store``: it may use the library and the store's parts
(its chunker, its embedders), and the library never imports it (pyproject's
import-linter contracts).
"""

from __future__ import annotations

from selfrag_core.backends.chroma import ChromaBackend

__all__ = ["ChromaBackend"]

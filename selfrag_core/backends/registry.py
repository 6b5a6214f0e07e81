"""Backends by URL scheme: ``--backend SCHEME://...`` opens the backend a package
registered for ``SCHEME`` in the ``selfrag.backends`` entry point group, as LLM
providers register in ``selfrag.llm_providers``. selfrag's own Chroma backend registers
itself so (pyproject.toml)::

    [project.entry-points."selfrag.backends"]
    chroma = "selfrag_core.backends.chroma:open_url"

The entry point names a factory ``open_url(url, *, embed="auto", chunk_size=600,
**options)`` returning the backend: ``embed`` is the ``--embedder`` choice (turn it into
an embedder with :func:`backend_embedder`), ``chunk_size`` the ``--chunk-size``; a
factory ignores the options it has no use for. A backend to write to keeps
:class:`~selfrag_core.ingest.WritableBackend` and passes :mod:`selfrag_core.conformance`
(docs/how-to/write-a-backend.md).
"""

from __future__ import annotations

import logging
import re
from importlib import metadata
from typing import Any

from selfrag_core.errors import ConfigurationError, MissingDependencyError

logger = logging.getLogger("selfrag")

#: the entry point group of the backends' URL schemes
BACKEND_GROUP = "selfrag.backends"
#: the embedder choices of ``--embedder`` (as ``presets.EMBEDDERS``)
EMBEDDER_CHOICES = ("auto", "minilm", "hashing", "none")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def schemes() -> dict[str, metadata.EntryPoint]:
    """The registered URL schemes (lower case) and their entry points, not loaded."""
    return {ep.name.lower(): ep for ep in metadata.entry_points(group=BACKEND_GROUP)}


def url_scheme(spec: Any) -> str | None:
    """The scheme of a ``--backend`` spec that is a URL: ``SCHEME://...`` (any scheme of two
    or more letters: an unregistered one fails when opened, naming the registered ones), or
    ``SCHEME:...`` of a registered scheme; else None (a drive letter is no scheme)."""
    if not isinstance(spec, str):
        return None
    found = _SCHEME.match(spec.strip())
    if found is None:
        return None
    scheme = found.group(1).lower()
    if spec.strip()[found.end() :].startswith("//") or scheme in schemes():
        return scheme
    return None


def open_url(url: str, *, embed: str = "auto", chunk_size: int = 600, **options: Any) -> Any:
    """The backend ``url`` names, made by the factory registered for its scheme. Raises
    ConfigurationError for an unknown scheme (naming the registered ones),
    MissingDependencyError when the registered factory cannot be imported."""
    scheme = url_scheme(url)
    registered = schemes()
    entry = registered.get(scheme or "")
    if entry is None:
        named = ", ".join(f"{s}://" for s in sorted(registered)) or "none"
        raise ConfigurationError(
            f"no backend is registered for {url!r} (registered: {named}); install the package that "
            f"provides it, or register a factory in the {BACKEND_GROUP!r} entry point group "
            "(docs/how-to/write-a-backend.md). selfrag's own chroma:// comes with selfrag itself: "
            "reinstall it (pip install -e .) if it is missing"
        )
    try:
        factory = entry.load()
    except (ImportError, AttributeError) as e:
        raise MissingDependencyError(
            f"the backend entry point {entry.name!r} ({entry.value}) cannot be loaded: {e}; reinstall "
            "its package or uninstall it"
        ) from e
    return factory(url, embed=embed, chunk_size=chunk_size, **options)


def backend_embedder(choice: str = "auto") -> Any:
    """The embedder of an external backend: as a new embedded index's (``EMBEDDER_CHOICES``),
    but never none, since a vector store needs vectors: "auto" is MiniLM when installed,
    else hashing (with a warning: it matches words, not meanings)."""
    from selfrag_core.local.embeddings import EMBEDDINGS_HINT, LocalEmbeddings, embeddings_available
    from selfrag_core.store.dense import HashingEmbeddings

    if choice not in EMBEDDER_CHOICES:
        raise ConfigurationError(f"unknown embedder {choice!r}; choose one of {', '.join(EMBEDDER_CHOICES)}")
    if choice == "none":
        raise ConfigurationError(
            "an external backend searches vectors: choose --embedder auto, minilm or hashing, not none"
        )
    if choice == "auto" and not embeddings_available():
        logger.warning(
            "the local embedder is not installed (%s): the backend's vectors come from hashing, "
            "which matches words, not meanings", EMBEDDINGS_HINT,
        )  # fmt: skip
        return HashingEmbeddings()
    return HashingEmbeddings() if choice == "hashing" else LocalEmbeddings()


def known_embedder(name: str | None) -> Any:
    """The embedder of ours that ``name`` names (MiniLM, default hashing), else None: how a
    backend follows the embedder a collection records."""
    from selfrag_core.local.embeddings import LocalEmbeddings
    from selfrag_core.store.dense import HashingEmbeddings

    if name == LocalEmbeddings.name:
        return LocalEmbeddings()
    hashing = HashingEmbeddings()
    return hashing if name == hashing.name else None

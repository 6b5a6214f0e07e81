"""``ChromaBackend``: a Chroma server as the backend of the strategies, the CLI and the server.

    backend = ChromaBackend.from_url("chroma://127.0.0.1:8001/docs", embedder=HashingEmbeddings())
    backend.add_document(text, {"source": "notes/paris.md"})   # chunked, embedded, upserted
    backend.retrieve("capital of France", top_k=3)             # RetrievedDocs, scores are distances
    backend.delete("notes/paris.md")

Only Chroma's HTTP client is used (``chromadb`` or the slimmer ``chromadb-client``), and
every vector comes from ``embedder``: Chroma's own embedding function is never set, so
nothing downloads a model. A new collection records the embedder's name and uses cosine
distance; opening a collection built with another embedder is a ConfigurationError (the
vectors would not compare).

It keeps the write contract (:class:`~selfrag_core.ingest.WritableBackend`, and the
conformance suite passes against a real server). Writes are idempotent: a document is split
by the embedded index's chunker, and each chunk's id is :func:`~selfrag_core.ingest.chunk_id`
(the SHA-256 of its source and text), so sending the same document again (a retried
``POST /documents``) upserts the same ids and duplicates nothing; sending a changed
document replaces its chunks (those no longer in it are deleted). A document without a
source gets a content-derived one (:func:`~selfrag_core.ingest.content_source`), as in the
embedded index. The object keeps no state but its client and collection handle, so any
number of processes can use one collection at once.

``chroma://`` URLs are registered through the ``selfrag.backends`` entry point group
(pyproject: ``chroma = "selfrag_core.backends.chroma:open_url"``), as any backend's scheme.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.ingest import chunk_id, content_source, document_parts
from selfrag_core.store.chunking import Chunker
from selfrag_core.store.dense import as_matrix, embedder_name, resolve_embedder
from selfrag_core.types import RetrievedDoc, ScoreKind

logger = logging.getLogger("selfrag")

INSTALL_HINT = "pip install 'selfrag[chroma]' (or the HTTP client alone: pip install chromadb-client)"
URL_EXAMPLE = "chroma://127.0.0.1:8001/docs"
#: the collection metadata key recording the embedder a collection was built with
EMBEDDER_KEY = "selfrag:embedder"
#: Chroma's rule for collection names
_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{1,510})[A-Za-z0-9]$")
_SCALARS = (str, int, float, bool)
#: chunks upserted per request
_BATCH = 256
#: chunks' metadata read per request when listing the sources
_PAGE = 5000


def _chromadb() -> Any:
    try:
        import chromadb
    except ImportError as e:
        raise MissingDependencyError(f"the Chroma backend needs chromadb ({e}): {INSTALL_HINT}") from e
    return chromadb


def check_collection_name(name: Any) -> str:
    if not isinstance(name, str) or not _COLLECTION_NAME.match(name) or ".." in name:
        raise ConfigurationError(
            f"{name!r} is not a Chroma collection name: 3-512 characters of letters, digits, '.', '_' "
            f"and '-', starting and ending with a letter or digit (e.g. {URL_EXAMPLE})"
        )
    return name


def parse_url(url: str) -> tuple[str, int, str]:
    """``chroma://HOST:PORT/COLLECTION`` as (host, port, collection); ConfigurationError
    with an example when a part is missing or wrong."""
    example = f"give chroma://HOST:PORT/COLLECTION, e.g. {URL_EXAMPLE}"
    if not isinstance(url, str):
        raise ConfigurationError(f"a Chroma URL must be a string; {example}")
    parts = urlsplit(url.strip())
    if parts.scheme != "chroma":
        raise ConfigurationError(f"{url!r} is not a chroma:// URL; {example}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"{url!r} has no valid port (a whole number 1-65535); {example}") from None
    if not parts.hostname:
        raise ConfigurationError(f"{url!r} names no host; {example}")
    if port is None or port == 0:
        raise ConfigurationError(f"{url!r} names no port; {example}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigurationError(f"{url!r} has parts a Chroma URL does not take (?, #, user@); {example}")
    collection = parts.path.strip("/")
    if not collection:
        raise ConfigurationError(f"{url!r} names no collection; {example}")
    if "/" in collection:
        raise ConfigurationError(f"{url!r}: the collection is one name, not a path; {example}")
    return parts.hostname, port, check_collection_name(collection)


def _http_client(address: str) -> Any:
    """An HttpClient to ``address`` ("http://host:port", "https://host:port" or "host:port")."""
    text = address if "://" in address else f"http://{address}"
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise ConfigurationError(
            f"{address!r} is not a Chroma server address; give http://HOST:PORT, or a chromadb client"
        )
    chromadb = _chromadb()
    from chromadb.config import Settings

    try:
        return chromadb.HttpClient(
            host=parts.hostname, port=port, ssl=parts.scheme == "https",
            settings=Settings(anonymized_telemetry=False),
        )  # fmt: skip
    except Exception as e:  # the client checks the server at construction
        raise ConfigurationError(
            f"cannot reach the Chroma server at {parts.hostname}:{port} ({type(e).__name__}: {e}); "
            f"start it (chroma run --host {parts.hostname} --port {port}) or fix the address",
            component="backend",
        ) from e


def open_url(url: str, *, embed: str = "auto", chunk_size: int = 600, **_: Any) -> ChromaBackend:
    """The ``selfrag.backends`` factory of ``chroma://HOST:PORT/COLLECTION``: a
    :class:`ChromaBackend` embedding with ``backend_embedder(embed)`` and chunking by
    ``chunk_size``; "auto" follows the embedder an existing collection was built with, as
    an index's manifest does."""
    from selfrag_core.backends.registry import backend_embedder, known_embedder

    recorded = known_embedder(recorded_embedder(url)) if embed == "auto" else None
    embedder = recorded if recorded is not None else backend_embedder(embed)
    return ChromaBackend.from_url(url, embedder, chunk_size=chunk_size)


def recorded_embedder(url: str) -> str | None:
    """The embedder name the collection a ``chroma://`` URL names was built with (None when
    it does not exist yet or recorded none): how :func:`open_url` follows a collection's
    embedder, as ``open_index`` follows an index's manifest."""
    host, port, collection = parse_url(url)
    client = _http_client(f"http://{host}:{port}")
    try:
        found = client.get_collection(collection, embedding_function=None)
    except Exception:  # NotFoundError (its class moved between chromadb versions)
        return None
    name = (found.metadata or {}).get(EMBEDDER_KEY)
    return name if isinstance(name, str) else None


def _where(metadata_filter: Any) -> dict[str, Any] | None:
    """A metadata filter as Chroma's ``where``: ``{"key": value}`` (a list value means
    "any of"; an operator dict such as ``{"$gte": 3}`` is passed on), several keys all
    holding; a dict whose keys start with ``$`` is a ``where`` already."""
    if metadata_filter is None:
        return None
    if not isinstance(metadata_filter, Mapping):
        raise ConfigurationError(
            f"the Chroma backend filters by a dict of metadata values, not a {type(metadata_filter).__name__}"
            " (e.g. {'source': 'notes/paris.md'} or {'year': {'$gte': 2020}})"
        )
    if not metadata_filter:
        return None
    if all(str(key).startswith("$") for key in metadata_filter):
        return dict(metadata_filter)
    clauses = [
        {key: {"$in": list(value)} if isinstance(value, (list, tuple, set, frozenset)) else value}
        for key, value in metadata_filter.items()
    ]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _check_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as Chroma stores it: string keys, scalar values; None values are left out."""
    checked: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"metadata keys must be strings, got {key!r}")
        if value is None:
            continue
        if not isinstance(value, _SCALARS):
            raise TypeError(
                f"metadata value for {key!r} must be a str, int, float or bool (got {type(value).__name__}):"
                " Chroma stores scalars only"
            )
        checked[key] = value
    return checked


class ChromaBackend:
    """A Chroma collection on a server, searched with ``embedder``'s vectors.

    ``url_or_client``: a ``chromadb`` client (``HttpClient``, or any client with
    ``get_or_create_collection``), or a server address ``"http://host:port"``.
    ``collection``: its name (created when missing). ``embedder``: an object with
    ``embed_documents`` and ``embed_query`` (``LocalEmbeddings()``, ``HashingEmbeddings()``,
    yours) or ``"hashing"``. ``chunk_size`` / ``chunk_overlap`` size the chunks as the
    embedded index's (default as ``selfrag index``: 600 and 100).

    Raises MissingDependencyError without chromadb, ConfigurationError when the server
    cannot be reached or the collection was built with another embedder.
    """

    #: Chroma returns distances (cosine for the collections created here): lower is better
    score_kind = ScoreKind.DISTANCE

    def __init__(
        self,
        url_or_client: Any,
        collection: str,
        *,
        embedder: Any,
        chunk_size: int = 600,
        chunk_overlap: int | None = None,
    ) -> None:
        if embedder is None:
            raise ConfigurationError(
                "the Chroma backend needs an embedder (Chroma's own would download a model): pass "
                "embedder=LocalEmbeddings() or embedder=HashingEmbeddings()"
            )
        self.embedder = resolve_embedder(embedder)
        self.chunker = Chunker(
            "recursive", chunk_size, chunk_size // 6 if chunk_overlap is None else chunk_overlap
        )
        self.collection_name = check_collection_name(collection)
        if isinstance(url_or_client, str):
            self.client = _http_client(url_or_client)
            self.address = url_or_client
        elif callable(getattr(url_or_client, "get_or_create_collection", None)):
            self.client = url_or_client
            self.address = type(url_or_client).__name__
        else:
            kind = type(url_or_client).__name__
            raise TypeError(f"url_or_client must be a chromadb client or 'http://host:port', got {kind}")
        self.embedder_name = embedder_name(self.embedder)
        self.collection = self._open_collection()

    @classmethod
    def from_url(cls, url: str, embedder: Any, **options: Any) -> ChromaBackend:
        """The collection a ``chroma://HOST:PORT/COLLECTION`` URL names, over HTTP."""
        host, port, collection = parse_url(url)
        backend = cls(f"http://{host}:{port}", collection, embedder=embedder, **options)
        backend.address = url
        return backend

    def _open_collection(self) -> Any:
        try:
            collection = self.client.get_or_create_collection(
                self.collection_name,
                metadata={"hnsw:space": "cosine", EMBEDDER_KEY: self.embedder_name},
                embedding_function=None,  # every vector is ours: Chroma's default would download a model
            )
        except Exception as e:
            raise ConfigurationError(
                f"cannot open the Chroma collection {self.collection_name!r} ({type(e).__name__}: {e})",
                component="backend",
            ) from e
        built_with = (collection.metadata or {}).get(EMBEDDER_KEY)
        if built_with is not None and built_with != self.embedder_name:
            raise ConfigurationError(
                f"the Chroma collection {self.collection_name!r} was built with the embedder {built_with!r}, "
                f"not {self.embedder_name!r}: their vectors do not compare; use the same embedder "
                "(--embedder) or another collection",
                component="backend",
            )
        return collection

    def __repr__(self) -> str:
        return (
            f"ChromaBackend({self.address!r}, collection={self.collection_name!r}, "
            f"embedder={self.embedder_name!r})"
        )

    # ------------------------------------------------------------------ search

    def retrieve(
        self, query: str, top_k: int = 5, metadata_filter: Mapping[str, Any] | None = None
    ) -> list[RetrievedDoc]:
        """The ``top_k`` nearest chunks, as RetrievedDocs whose score is the cosine distance
        (``ScoreKind.DISTANCE``) and whose metadata holds ``source`` and ``chunk_index``."""
        vector = as_matrix([self.embedder.embed_query(query)], 1)[0]
        found = self.collection.query(
            query_embeddings=[vector.tolist()], n_results=max(1, int(top_k)),
            where=_where(metadata_filter), include=["documents", "metadatas", "distances"],
        )  # fmt: skip
        ids, texts = found["ids"][0], (found.get("documents") or [[]])[0]
        metas = (found.get("metadatas") or [[None] * len(ids)])[0]
        distances = (found.get("distances") or [[None] * len(ids)])[0]
        docs: list[RetrievedDoc] = []
        for doc_id, text, meta, distance in zip(ids, texts, metas, distances, strict=False):
            if text is None:
                continue
            kind = ScoreKind.DISTANCE if distance is not None else ScoreKind.UNKNOWN
            score = None if distance is None else float(distance)
            docs.append(RetrievedDoc(text, score, dict(meta or {}), doc_id, kind))
        return docs

    # ------------------------------------------------------------------ writing

    def add_document(self, text: str, metadata: Mapping[str, Any] | None = None) -> int:
        """Chunk, embed and upsert one document (``metadata['source']`` names it); returns
        the number of chunks that were not stored before (0 when it was sent already)."""
        return self.add_documents([{"text": text, "metadata": dict(metadata or {})}])

    def add_documents(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """:meth:`add_document` for several: dicts with ``text`` and optionally ``source``,
        ``metadata`` and further metadata keys (as the embedded index's ``index_many``).
        Every document is checked first; returns the number of new chunks."""
        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        sources: dict[str, set[str]] = {}
        for i, doc in enumerate(documents):
            try:
                source, chunks = self._chunks(doc)
            except (TypeError, ValueError) as e:
                raise type(e)(f"document {i}: {e}") from e
            kept = sources.setdefault(source, set())
            for chunk_text, meta in chunks:
                chunk = chunk_id(source, chunk_text)  # stable: the same text of a source, the same id
                if chunk in kept:  # the same text twice in a document: stored once
                    continue
                kept.add(chunk)
                ids.append(chunk)
                texts.append(chunk_text)
                metas.append(meta)
        if not ids:
            return 0
        vectors = as_matrix(self.embedder.embed_documents(texts), len(texts))
        existing = set(self.collection.get(ids=ids, include=[])["ids"])
        for start in range(0, len(ids), _BATCH):
            end = start + _BATCH
            self.collection.upsert(
                ids=ids[start:end], embeddings=vectors[start:end].tolist(),
                documents=texts[start:end], metadatas=metas[start:end],  # type: ignore[arg-type]
            )  # fmt: skip
        for source, kept in sources.items():  # a changed document: its old chunks go
            stale = [i for i in self._ids_of(source) if i not in kept]
            if stale:
                self.collection.delete(ids=stale)
        return sum(1 for i in ids if i not in existing)

    def _chunks(self, doc: Mapping[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        text, source, metadata = document_parts(doc)
        meta = _check_metadata(metadata)
        meta.pop("checksum", None)
        if source is None:  # content-addressed, as in the embedded index
            source = content_source(text, meta)
        return source, [
            (c.text, {**c.metadata, "source": source, "chunk_index": c.index})
            for c in self.chunker.chunk(text, **meta)
        ]

    def _ids_of(self, source: str) -> list[str]:
        ids: list[str] = self.collection.get(where={"source": source}, include=[])["ids"]
        return ids

    def delete(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many were removed."""
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        ids = self._ids_of(source)
        if ids:
            self.collection.delete(ids=ids)
        return len(ids)

    def sources(self) -> set[str]:
        """The sources stored (read from every chunk's metadata, a page at a time)."""
        found: set[str] = set()
        offset = 0
        while True:
            page = self.collection.get(include=["metadatas"], limit=_PAGE, offset=offset)
            metas = page.get("metadatas") or []
            found.update(str(m["source"]) for m in metas if m and m.get("source") is not None)
            if len(page["ids"]) < _PAGE:
                return found
            offset += _PAGE

    # ------------------------------------------------------------------ stats

    def count(self) -> int:
        """Number of stored chunks."""
        return int(self.collection.count())

    def __len__(self) -> int:
        return self.count()

    def stats(self) -> dict[str, Any]:
        """What ``/stats`` and ``selfrag stats`` may show: the server, the collection, the
        embedder and the number of chunks."""
        return {
            "backend": "chroma",
            "address": self.address,
            "collection": self.collection_name,
            "embedder": self.embedder_name,
            "chunks": self.count(),
        }

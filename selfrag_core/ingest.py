"""The write contract of a backend, and the one ingestion path.

A backend the strategies only search needs ``retrieve(query, top_k)``. A backend that
``selfrag index``, ``POST /documents``, ``selfrag eval --corpus`` and your own code
write to is a :class:`WritableBackend`:

    add_documents(documents) -> int   # dicts {text, source?, metadata?, more metadata keys};
                                      # returns the chunks newly stored (0: all there already)
    delete(source) -> int             # every chunk of one source; returns how many went
    count() -> int                    # the chunks stored

and, where it has them, ``sources()`` (the stored source names: ``selfrag index`` drops
the files gone from a folder with it), ``texts_of(source)`` (a source's stored chunk
texts: ``selfrag mcp`` serves them as resources), ``save()`` (make the writes durable:
the embedded index writes its directory), ``changed_on_disk()`` and ``refresh()`` (another
process saved the shared copy; reload it: the server's workers ask before each query),
and async twins ``aadd_documents`` / ``adelete`` /
``acount`` / ``asave`` (otherwise the sync method runs in a worker thread).

The rules every backend keeps, checked by the shipped conformance suite
(:mod:`selfrag_core.conformance`): a document's ``source`` names it, and adding a source
again replaces its chunks (the same text twice stores nothing new); a document without
a source gets :func:`content_source`, so a retry is the same document; every document of
a call is checked before any is stored (``TypeError`` / ``ValueError`` naming it); a
chunk's id is stable (:func:`chunk_id` where the backend picks the ids); deleting an
unknown source removes nothing and returns 0.

:func:`ingest` and :func:`aingest` are the one way the CLI, the HTTP service and the
evaluation harness write: in batches, saving once at the end when asked and anything
changed.
:func:`writer` resolves a backend once into a :class:`Writer`; an object with only the
specification's ``add_document(text, metadata)`` is written one document at a time.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from selfrag_core.errors import ConfigurationError

__all__ = [
    "Ingested",
    "WritableBackend",
    "Writer",
    "aingest",
    "chunk_id",
    "content_source",
    "digest",
    "document_parts",
    "ingest",
    "writer",
]

#: where the how-to for writing a backend lives (named in the errors below)
HOW_TO = "docs/how-to/write-a-backend.md"


@runtime_checkable
class WritableBackend(Protocol):
    """What a backend needs to be written to (see the module docstring)."""

    def add_documents(self, documents: Sequence[Mapping[str, Any]]) -> int: ...

    def delete(self, source: str) -> int: ...

    def count(self) -> int: ...


# ----------------------------------------------------------------------------- helpers


def digest(*parts: str) -> str:
    """The SHA-256 (hex) of the parts, each ended by a NUL: the content-addressed ids,
    sources and checksums of the embedded index and the helpers below."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def chunk_id(source: str, text: str) -> str:
    """The stable id of a chunk: the SHA-256 (hex) of its source and its text, so the same
    text of a source gets the same id in every process and a retried write upserts it."""
    if not isinstance(source, str) or not isinstance(text, str):
        raise TypeError("chunk_id takes the source and the text, both str")
    return digest(source, text)


def content_source(text: str, metadata: Mapping[str, Any] | None = None) -> str:
    """The source of a document given none: ``doc-`` and 16 hex digits of its text and
    metadata, so sending it again names the same document (as the embedded index does)."""
    return "doc-" + digest(text, json.dumps(dict(metadata or {}), sort_keys=True))[:16]


def document_parts(document: Mapping[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """``(text, source or None, metadata)`` of one document dict: ``text``, optional
    ``source``, optional ``metadata`` dict and further metadata keys (which win). Raises
    TypeError / ValueError for a document that is not such a dict, has no text, or whose
    source is not a non-empty str."""
    if not isinstance(document, Mapping):
        raise TypeError(f"a document must be a dict with a 'text' key, got {type(document).__name__}")
    if "text" not in document:
        raise ValueError("a document needs a 'text' key")
    text = document["text"]
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: there is nothing to index")
    nested = document.get("metadata") or {}
    if not isinstance(nested, Mapping):
        raise TypeError("'metadata' must be a dict")
    extra = {k: v for k, v in document.items() if k not in ("text", "metadata", "source")}
    metadata = {**nested, **extra}
    nested_source = metadata.pop("source", None)
    source = document.get("source")
    source = nested_source if source is None else source
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise TypeError(f"source must be a non-empty str or None, got {source!r}")
    return text, source, metadata


# ----------------------------------------------------------------------------- resolution


def _method(backend: Any, name: str) -> Callable[..., Any] | None:
    found = getattr(backend, name, None)
    return found if callable(found) else None


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def _twin(backend: Any, name: str, sync: Callable[..., Any] | None) -> Callable[..., Awaitable[Any]] | None:
    """The async twin ``name`` where the backend has it as a coroutine function, else
    ``sync`` run in a worker thread (None without either)."""
    found = _method(backend, name)
    if found is not None and inspect.iscoroutinefunction(found):
        return found
    if sync is None:
        return None
    return lambda *args: _in_thread(sync, *args)


def _chunks(value: Any) -> int | None:
    """A write's return value as a chunk count (None when it is not one: an id, None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Writer:
    """A backend resolved once for writing (:func:`writer`). ``can_delete``,
    ``can_count``, ``can_list``, ``can_read``, ``can_save`` and ``can_refresh`` say what it
    has; the methods raise ConfigurationError for what it has not."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        name = type(backend).__name__
        self.name = name
        add = _method(backend, "add_documents")
        count = _method(backend, "count")
        legacy = _method(backend, "add_document")
        if add is not None and count is not None:
            self._add: Callable[[list[dict[str, Any]]], Any] = add
            self.batched = True
        elif legacy is not None:  # the specification's minimal backend: one document a call

            def one_by_one(documents: list[dict[str, Any]]) -> int | None:
                counts = []
                for doc in documents:
                    text, source, metadata = document_parts(doc)
                    meta = metadata if source is None else {**metadata, "source": source}
                    counts.append(_chunks(legacy(text, meta)))
                return None if None in counts else sum(c for c in counts if c is not None)

            self._add = one_by_one
            self.batched = False
        else:
            hint = (
                " (a framework's vector store or index: wrap it with the adapter's as_backend(...))"
                if add is not None
                else ""
            )
            raise ConfigurationError(
                f"{name} cannot store documents{hint}: give it add_documents(documents), "
                f"delete(source) and count() (see {HOW_TO}), or fill it with its own tools",
                component="backend",
            )
        self._delete = _method(backend, "delete")
        self._count = count
        self._sources = _method(backend, "sources")
        self._texts = _method(backend, "texts_of")
        self._save = _method(backend, "save")
        self._changed = _method(backend, "changed_on_disk")
        self._refresh = _method(backend, "refresh")
        self._aadd = _twin(backend, "aadd_documents", self._add)
        self._adelete = _twin(backend, "adelete", self._delete)
        self._acount = _twin(backend, "acount", self._count)
        self._asave = _twin(backend, "asave", self._save)
        self.can_delete = self._delete is not None and _first_parameter(self._delete) != "ids"
        self.can_count = count is not None
        self.can_list = self._sources is not None
        self.can_read = self.can_list and self._texts is not None
        self.can_save = self._save is not None
        self.can_refresh = self._changed is not None and self._refresh is not None

    def __repr__(self) -> str:
        return f"Writer({self.name})"

    def _refuse(self, what: str, method: str) -> ConfigurationError:
        return ConfigurationError(
            f"{self.name} cannot {what} (it has no {method}; see {HOW_TO})", component="backend"
        )

    # ---------------------------------------------------------------- sync

    def add_documents(self, documents: Sequence[Mapping[str, Any]]) -> int | None:
        """Store ``documents``; the chunks newly stored (None when the backend does not say)."""
        return _chunks(self._add([dict(d) for d in documents]))

    def delete(self, source: str) -> int:
        """Remove every chunk of ``source``; how many went."""
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        if self._delete is None or not self.can_delete:
            raise self._refuse("delete documents by source", "delete(source)")
        before = None if self.batched else self.count()  # a minimal backend may not say
        removed = _chunks(self._delete(source))
        return self._removed(removed, before, None if removed is not None else self.count())

    @staticmethod
    def _removed(removed: int | None, before: int | None, after: int | None) -> int:
        """The chunks a delete removed: as it said, else as the count fell (else 0)."""
        if removed is not None:
            return removed
        return before - after if before is not None and after is not None else 0

    def count(self) -> int | None:
        """The chunks stored (None when the backend cannot count)."""
        return None if self._count is None else _chunks(self._count())

    def sources(self) -> list[str]:
        """The stored source names."""
        if self._sources is None:
            raise self._refuse("list its sources", "sources()")
        return sorted(self._sources())

    def texts_of(self, source: str) -> list[str]:
        """The stored chunk texts of ``source`` (empty for an unknown one)."""
        if self._texts is None:
            raise self._refuse("read a source's text", "texts_of(source)")
        return list(self._texts(source))

    def changed_on_disk(self) -> bool:
        """Whether another process saved the backend's shared copy since it was loaded
        (False for a backend that cannot tell): cheap, asked before each query."""
        return self._changed is not None and bool(self._changed())

    def refresh(self) -> bool:
        """Reload what another process saved, where the backend can; whether it did."""
        return self._refresh is not None and bool(self._refresh())

    def save(self, *target: Any) -> bool:
        """Make the writes durable where the backend can (``save(*target)``); whether it did."""
        if self._save is None:
            return False
        self._save(*target)
        return True

    # ---------------------------------------------------------------- async

    async def aadd_documents(self, documents: Sequence[Mapping[str, Any]]) -> int | None:
        assert self._aadd is not None
        return _chunks(await self._aadd([dict(d) for d in documents]))

    async def adelete(self, source: str) -> int:
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        if self._adelete is None or not self.can_delete:
            raise self._refuse("delete documents by source", "delete(source)")
        before = None if self.batched else await self.acount()
        removed = _chunks(await self._adelete(source))
        return self._removed(removed, before, None if removed is not None else await self.acount())

    async def acount(self) -> int | None:
        return None if self._acount is None else _chunks(await self._acount())

    async def asave(self, *target: Any) -> bool:
        if self._asave is None:
            return False
        await self._asave(*target)
        return True


def _first_parameter(fn: Any) -> str | None:
    """A ``delete(ids)`` deletes by id, not by source (a framework's store)."""
    try:
        return next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return None


def writer(backend: Any) -> Writer:
    """``backend`` resolved for writing (a :class:`Writer` is returned as it is). Raises
    ConfigurationError, naming what to add, for an object that cannot store documents."""
    return backend if isinstance(backend, Writer) else Writer(backend)


# ----------------------------------------------------------------------------- ingestion


@dataclass
class Ingested:
    """What one :func:`ingest` did: ``documents`` sent, ``chunks`` newly stored (None when
    the backend does not say), their ``sources`` in order, and whether it was ``saved``."""

    documents: int = 0
    chunks: int | None = 0
    sources: list[str] = field(default_factory=list)
    saved: bool = False

    @property
    def changed(self) -> bool:
        """Whether anything may have been stored (an unknown count may have)."""
        return self.chunks != 0


def _source(doc: Mapping[str, Any]) -> str | None:
    source = doc.get("source")
    if source is None and isinstance(doc.get("metadata"), Mapping):
        source = doc["metadata"].get("source")
    return source if isinstance(source, str) else None


def _batches(documents: Iterable[Mapping[str, Any]], size: int | None) -> Iterable[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for doc in documents:
        batch.append(dict(doc) if isinstance(doc, Mapping) else doc)
        if size is not None and len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _check_size(batch_size: int | None) -> None:
    whole = isinstance(batch_size, int) and not isinstance(batch_size, bool)
    if batch_size is not None and (not whole or batch_size < 1):
        raise ValueError(f"batch_size must be a whole number >= 1 or None (one batch), got {batch_size!r}")


def _tally(report: Ingested, batch: list[dict[str, Any]], added: int | None) -> None:
    report.documents += len(batch)
    report.sources += [s for s in map(_source, batch) if s is not None]
    report.chunks = None if added is None or report.chunks is None else report.chunks + added


def ingest(
    backend: Any,
    documents: Iterable[Mapping[str, Any]],
    *,
    batch_size: int | None = 64,
    save: bool | Sequence[Any] = False,
    progress: Callable[[int], Any] | None = None,
) -> Ingested:
    """Write ``documents`` (dicts: ``text``, optional ``source``, ``metadata``, further
    metadata keys) to ``backend`` in batches of ``batch_size`` (None: one batch, all or
    nothing on a backend that checks first), calling ``progress(n)`` after each. Then,
    when anything changed and ``save`` is true, the backend saves where it can (``save``
    may be the arguments of its ``save``, e.g. ``(directory,)``); what earlier batches
    wrote is saved even when a later one raises. Raises ConfigurationError for a backend that cannot
    store documents, and what the backend raises for a bad document."""
    _check_size(batch_size)
    out = writer(backend)
    report = Ingested()
    try:
        for batch in _batches(documents, batch_size):
            _tally(report, batch, out.add_documents(batch))
            if progress is not None:
                progress(len(batch))
    finally:
        if save and report.documents and report.changed:
            report.saved = out.save(*(() if save is True else tuple(save)))
    return report


async def aingest(
    backend: Any,
    documents: Iterable[Mapping[str, Any]],
    *,
    batch_size: int | None = 64,
    save: bool | Sequence[Any] = False,
    progress: Callable[[int], Any] | None = None,
) -> Ingested:
    """Async :func:`ingest`: the backend's async twins where it has them, else its sync
    methods in a worker thread."""
    _check_size(batch_size)
    out = writer(backend)
    report = Ingested()
    try:
        for batch in _batches(documents, batch_size):
            _tally(report, batch, await out.aadd_documents(batch))
            if progress is not None:
                progress(len(batch))
    finally:
        if save and report.documents and report.changed:
            report.saved = await out.asave(*(() if save is True else tuple(save)))
    return report

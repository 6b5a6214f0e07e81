"""Ingestion and deletion against whatever backend the service was given.

Writes are serialised by one lock and, with an index directory and a backend that can
``save``, persisted after every change. Processes sharing that directory (``--workers N``,
``selfrag index`` beside the server) take turns through the store's own lock: each change
starts from what the others saved (reloaded), and its save, under the directory's lock,
applies it over whatever another process saved meanwhile (``RAG.save``). An
external backend (``--backend chroma://...``) is written to directly; it makes chunk ids
from a document's source and text, so a retried write upserts (hence :func:`source_of`).

Backends are used by duck typing, best first: ``aindex_many(documents)`` (all or nothing),
``aindex(text, source=..., **metadata)``, ``index(...)``, ``add_document(text, metadata)``;
``delete(source)`` and ``count()`` where they exist (``delete(ids)`` is not called).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from selfrag_core.serve.models import DocumentIn, IngestResponse

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufffd]")  # as the store: \t\n\r\f\v are text


class DocumentError(ValueError):
    """A document the service refuses (empty, binary, too long)."""


class UnsupportedError(TypeError):
    """The backend cannot do what was asked (e.g. it has no ``delete``)."""


def check_text(doc: DocumentIn, max_chars: int) -> None:
    """Raise DocumentError for an empty, binary-looking or over-long document."""
    name = f"document {doc.source!r}" if doc.source else "the document"
    if not doc.text.strip():
        raise DocumentError(f"{name} is empty; send its text in 'text'")
    if "\x00" in doc.text or len(_CONTROL.findall(doc.text)) > 0.05 * len(doc.text):
        raise DocumentError(f"{name} looks binary (NUL or control characters); send extracted plain text")
    if len(doc.text) > max_chars:
        raise DocumentError(f"{name} is {len(doc.text):,} characters; the limit is {max_chars:,}: split it")


def source_of(doc: DocumentIn) -> str:
    """The document's source, or a content hash when none was given."""
    return doc.source or "sha256:" + hashlib.sha256(doc.text.encode("utf-8")).hexdigest()[:16]


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Await ``fn`` if it is async, else run it in a thread (backend writes may be slow)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def _first_parameter(fn: Any) -> str | None:
    try:
        return next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return None


class DocumentStore:
    """The service's write path to its backend."""

    def __init__(self, backend: Any, index_dir: str | Path | None = None) -> None:
        self.backend = backend
        self.index_dir = Path(index_dir) if index_dir is not None else None
        self._lock = asyncio.Lock()

    def count(self) -> int | None:
        counter = getattr(self.backend, "count", None)
        if callable(counter):
            value = counter()
            return value if isinstance(value, int) else None
        docs = getattr(self.backend, "documents", None)
        return len(docs) if isinstance(docs, list) else None

    async def sync(self) -> None:
        """Reload the backend if another process saved the shared index since."""
        changed = getattr(self.backend, "changed_on_disk", None)
        if self.index_dir is not None and callable(changed) and changed():
            await asyncio.to_thread(self.backend.refresh)

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        """This process's lock, and the index as another process last saved it (the save
        after the change locks the directory; see the module docstring)."""
        async with self._lock:
            await self.sync()
            yield

    async def add(self, docs: list[DocumentIn]) -> IngestResponse:
        if not any(callable(getattr(self.backend, n, None)) for n in ("aindex", "index", "add_document")):
            raise UnsupportedError(f"{type(self.backend).__name__} cannot index documents (no add_document)")
        sources = [source_of(d) for d in docs]
        counts: list[Any] = []  # one per call that succeeded
        async with self._writing():
            try:
                batch = getattr(self.backend, "aindex_many", None)
                if callable(batch):  # all or nothing
                    items = [
                        {"text": d.text, "source": source, "metadata": dict(d.metadata)}
                        for d, source in zip(docs, sources, strict=True)
                    ]
                    counts.append(await batch(items))
                else:
                    for doc, source in zip(docs, sources, strict=True):
                        counts.append(await self._add_one(doc.text, source, dict(doc.metadata)))
            finally:  # what was indexed before a failure is kept
                persisted = await self._persist() if counts else False
        chunks = sum(counts) if all(isinstance(n, int) for n in counts) else None
        return IngestResponse(
            indexed=len(sources), chunks=chunks, sources=sources, count=self.count(), persisted=persisted
        )

    async def _add_one(self, text: str, source: str, metadata: dict[str, Any]) -> Any:
        b = self.backend
        for name in ("aindex", "index"):
            fn = getattr(b, name, None)
            if callable(fn):
                return await _call(fn, text, source=source, **metadata)
        return await _call(b.add_document, text, {**metadata, "source": source})

    async def delete(self, source: str) -> tuple[int | None, bool]:
        """Delete every chunk of ``source``; returns (chunks removed or None, persisted).
        Raises KeyError when the backend shows nothing was removed."""
        deleter = getattr(self.backend, "delete", None)
        if not callable(deleter):
            raise UnsupportedError(f"{type(self.backend).__name__} cannot delete documents (no delete)")
        if _first_parameter(deleter) == "ids":
            raise UnsupportedError(
                f"{type(self.backend).__name__} deletes by id (delete(ids)), not by source: delete there"
            )
        async with self._writing():
            before = self.count()
            returned = await _call(deleter, source)
            after = self.count()
            removed = returned if isinstance(returned, int) and not isinstance(returned, bool) else None
            if removed is None and before is not None and after is not None:
                removed = before - after
            if removed == 0 or returned is False:
                raise KeyError(source)
            return removed, await self._persist()

    async def _persist(self) -> bool:
        saver = getattr(self.backend, "save", None)
        if self.index_dir is None or not callable(saver):
            return False
        await _call(saver, self.index_dir)
        return True

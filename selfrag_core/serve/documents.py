"""Ingestion and deletion against whatever backend the service was given.

Writes are serialised by one lock and, with an index directory and a backend that can
``save``, persisted after every change. Processes sharing that directory (``--workers N``,
``selfrag index`` beside the server) take turns through the store's own lock: each change
starts from what the others saved (reloaded), and its save, under the directory's lock,
applies it over whatever another process saved meanwhile (``RAG.save``). An
external backend (``--backend chroma://...``) is written to directly; it makes chunk ids
from a document's source and text, so a retried write upserts (hence :func:`source_of`).

The backend is resolved once for writing (:func:`selfrag_core.ingest.writer`: the write
contract ``add_documents`` / ``delete`` / ``count`` and their async twins, or the
specification's ``add_document`` one document at a time), and every batch is written
through :func:`selfrag_core.ingest.aingest`, as ``selfrag index`` writes through ``ingest``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.ingest import Writer, aingest, writer
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


class DocumentStore:
    """The service's write path to its backend."""

    def __init__(self, backend: Any, index_dir: str | Path | None = None) -> None:
        self.backend = backend
        self.index_dir = Path(index_dir) if index_dir is not None else None
        self._lock = asyncio.Lock()
        try:
            self.writer: Writer | None = writer(backend)
            self._refusal = ""
        except ConfigurationError as e:  # a read-only backend: searching works, writing says why not
            self.writer, self._refusal = None, str(e)

    def _writable(self) -> Writer:
        if self.writer is None:
            raise UnsupportedError(self._refusal)
        return self.writer

    def count(self) -> int | None:
        return None if self.writer is None else self.writer.count()

    async def sync(self) -> None:
        """Reload the backend if another process saved the shared index since."""
        w = self.writer
        if self.index_dir is not None and w is not None and w.changed_on_disk():
            await asyncio.to_thread(w.refresh)

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        """This process's lock, and the index as another process last saved it (the save
        after the change locks the directory; see the module docstring)."""
        async with self._lock:
            await self.sync()
            yield

    def _save(self) -> tuple[Any, ...] | bool:
        """What ``aingest`` saves with: into the index directory, when there is one."""
        return False if self.index_dir is None else (self.index_dir,)

    async def add(self, docs: list[DocumentIn]) -> IngestResponse:
        out = self._writable()
        sources = [source_of(d) for d in docs]
        items = [
            {"text": d.text, "source": source, "metadata": dict(d.metadata)}
            for d, source in zip(docs, sources, strict=True)
        ]
        async with self._writing():  # one batch: all or nothing where the backend checks first
            report = await aingest(out, items, batch_size=None, save=self._save())
        # unchanged documents are on disk already when the backend saves there
        persisted = report.saved or (not report.changed and out.can_save and self.index_dir is not None)
        return IngestResponse(
            indexed=len(sources),
            chunks=report.chunks,
            sources=sources,
            count=self.count(),
            persisted=persisted,
        )

    async def delete(self, source: str) -> tuple[int | None, bool]:
        """Delete every chunk of ``source``; returns (chunks removed, persisted).
        Raises KeyError when nothing was removed."""
        out = self._writable()
        if not out.can_delete:
            raise UnsupportedError(
                f"{out.name} cannot delete documents by source (it has no delete(source)): delete there"
            )
        async with self._writing():
            removed = await out.adelete(source)
            if removed == 0:
                raise KeyError(source)
            saving = self._save()
            return removed, isinstance(saving, tuple) and await out.asave(*saving)

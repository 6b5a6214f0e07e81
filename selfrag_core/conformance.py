"""The backend conformance suite: the tests every writable backend passes, as Haystack
ships its document-store tests and LangChain its standard tests.

Subclass :class:`BackendConformance` in a test module and give it a ``backend`` fixture
returning a new, empty backend; pytest collects the inherited tests::

    import pytest
    from selfrag_core.conformance import BackendConformance

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        def backend(self):
            return MyBackend()

What they check is the write contract of :mod:`selfrag_core.ingest` (add, delete by
source, count, optional sources and save, their async twins) and that what was written
is what ``retrieve(query, top_k)`` finds. The documents are short (one chunk each in any
chunker of 200 characters or more) and share no words, so any embedder that matches
words (hashing, BM25) ranks the right one first. The suite needs pytest only to run it;
the async tests run their own event loop, so pytest-asyncio is not needed, and
:meth:`BackendConformance.check` runs them all without pytest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from selfrag_core.ingest import aingest, chunk_id, content_source, ingest, writer
from selfrag_core.types import RetrievedDoc

__all__ = ["DOCUMENTS", "BackendConformance"]

#: the suite's corpus: (source, text) pairs without a word in common
DOCUMENTS = (
    ("notes/paris.md", "Paris is the capital of France and lies on the Seine."),
    ("notes/nile.md", "The Nile flows north through Egypt into the Mediterranean."),
    ("notes/bees.md", "Honeybees dance to show their hive where flowers grow."),
)
_PARIS, _NILE, _BEES = DOCUMENTS


def _doc(pair: tuple[str, str], **metadata: Any) -> dict[str, Any]:
    return {"text": pair[1], "source": pair[0], "metadata": metadata}


def _sources(docs: list[Any]) -> list[Any]:
    return [d.metadata.get("source") for d in docs]


class _Raises:
    """``with _Raises(TypeError, ValueError): ...`` without importing pytest."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        if kind is None:
            raise AssertionError(f"expected one of {[k.__name__ for k in self.kinds]} to be raised")
        return issubclass(kind, self.kinds)


class BackendConformance:
    """The inherited tests. Override the class attributes where a backend differs:
    ``top_k`` (results asked for where all are wanted), ``stable_ids`` (False when
    retrieval returns no chunk ids) and ``saves`` (False when the fixture's backend has a
    ``save`` but nowhere to save to, as the embedded store without a directory)."""

    top_k = 10
    stable_ids = True
    saves = True

    @classmethod
    def check(cls, make_backend: Callable[[], Any]) -> list[str]:
        """Run every test without pytest, each on a new backend from ``make_backend()``;
        returns the tests' names. Raises AssertionError naming the first that fails."""
        suite = cls()
        names = sorted(name for name in dir(cls) if name.startswith("test_"))
        for name in names:
            try:
                getattr(suite, name)(make_backend())
            except AssertionError as e:
                raise AssertionError(f"{cls.__name__}.{name}: {e}") from e
        return names

    # ---------------------------------------------------------------- helpers

    def retrieve(self, backend: Any, query: str, top_k: int | None = None) -> list[RetrievedDoc]:
        """What ``backend`` finds for ``query`` (its ``retrieve(query, top_k)``)."""
        found = backend.retrieve(query, top_k or self.top_k)
        docs = list(found)
        assert all(isinstance(d, RetrievedDoc) for d in docs), f"retrieve returned {docs!r}"
        return docs

    def fill(self, backend: Any) -> int:
        """The suite's three documents added; the chunks the backend reports."""
        added = writer(backend).add_documents([_doc(pair, topic="test") for pair in DOCUMENTS])
        assert added is not None and added >= len(DOCUMENTS)
        return added

    # ---------------------------------------------------------------- add and count

    def test_a_new_backend_is_empty(self, backend: Any) -> None:
        assert writer(backend).count() == 0

    def test_added_documents_are_counted_and_found(self, backend: Any) -> None:
        added = self.fill(backend)
        assert writer(backend).count() == added
        best = self.retrieve(backend, "Which river flows through Egypt?", 1)
        assert [d.text for d in best] == [_NILE[1]] and _sources(best) == [_NILE[0]]

    def test_metadata_is_returned_with_the_source(self, backend: Any) -> None:
        self.fill(backend)
        (best,) = self.retrieve(backend, "honeybees dance flowers", 1)
        assert best.metadata.get("source") == _BEES[0] and best.metadata.get("topic") == "test"

    def test_the_same_document_again_stores_nothing_new(self, backend: Any) -> None:
        added = self.fill(backend)
        again = writer(backend).add_documents([_doc(pair, topic="test") for pair in DOCUMENTS])
        assert again == 0 and writer(backend).count() == added

    def test_a_changed_document_replaces_its_chunks(self, backend: Any) -> None:
        self.fill(backend)
        before = writer(backend).count()
        changed = (_PARIS[0], "Lyon lies where the Rhone meets the Saone.")
        assert writer(backend).add_documents([_doc(changed)]) == 1
        assert writer(backend).count() == before
        found = self.retrieve(backend, "Paris capital France Lyon Rhone")
        texts = [d.text for d in found if d.metadata.get("source") == _PARIS[0]]
        assert texts == [changed[1]], f"the old text of the source is still found: {texts}"

    def test_a_document_without_a_source_gets_its_content_source(self, backend: Any) -> None:
        w = writer(backend)
        text = "Volcanoes erupt when gas pressure drives magma upward."
        assert w.add_documents([{"text": text}]) == 1
        assert w.add_documents([{"text": text}]) == 0  # a retry is the same document
        (best,) = self.retrieve(backend, "volcanoes magma", 1)
        assert best.metadata.get("source") == content_source(text)

    def test_a_bad_document_fails_the_call_and_stores_nothing(self, backend: Any) -> None:
        w = writer(backend)
        for bad in ({"source": "x.md"}, {"text": "  ", "source": "x.md"}, {"text": 3}, "text"):
            with _Raises(TypeError, ValueError):
                w.add_documents([_doc(_PARIS), bad])  # type: ignore[list-item]
        assert w.count() == 0

    def test_chunk_ids_are_stable(self, backend: Any) -> None:
        if not self.stable_ids:
            return
        self.fill(backend)
        (first,) = self.retrieve(backend, "Seine capital", 1)
        writer(backend).add_documents([_doc(_PARIS, topic="test")])
        (again,) = self.retrieve(backend, "Seine capital", 1)
        assert first.id and first.id == again.id
        assert chunk_id(_PARIS[0], _PARIS[1]) == chunk_id(_PARIS[0], _PARIS[1])

    # ---------------------------------------------------------------- delete

    def test_delete_removes_every_chunk_of_a_source(self, backend: Any) -> None:
        added = self.fill(backend)
        w = writer(backend)
        removed = w.delete(_NILE[0])
        assert removed >= 1 and w.count() == added - removed
        assert _NILE[0] not in _sources(self.retrieve(backend, "Nile Egypt Mediterranean"))

    def test_deleting_an_unknown_source_removes_nothing(self, backend: Any) -> None:
        added = self.fill(backend)
        assert writer(backend).delete("notes/never-added.md") == 0
        assert writer(backend).count() == added

    def test_sources_lists_what_was_added(self, backend: Any) -> None:
        w = writer(backend)
        if not w.can_list:
            return
        self.fill(backend)
        assert set(w.sources()) == {source for source, _ in DOCUMENTS}
        w.delete(_BEES[0])
        assert set(w.sources()) == {_PARIS[0], _NILE[0]}

    def test_texts_of_reads_a_source_back(self, backend: Any) -> None:
        w = writer(backend)
        if not w.can_read:
            return
        self.fill(backend)
        assert "".join(w.texts_of(_NILE[0])).split() == _NILE[1].split()
        assert w.texts_of("notes/never-added.md") == []

    # ---------------------------------------------------------------- ingest, save, async

    def test_ingest_writes_in_batches_and_reports(self, backend: Any) -> None:
        batches: list[int] = []
        report = ingest(backend, [_doc(pair) for pair in DOCUMENTS], batch_size=2, progress=batches.append)
        assert batches == [2, 1] and report.documents == 3
        assert report.sources == [source for source, _ in DOCUMENTS]
        assert report.chunks == writer(backend).count() and not report.saved

    def test_save_keeps_what_was_written(self, backend: Any) -> None:
        w = writer(backend)
        if not self.saves:
            return
        report = ingest(backend, [_doc(pair) for pair in DOCUMENTS], save=True)
        assert report.saved is w.can_save
        assert w.count() == report.chunks
        assert ingest(backend, [_doc(_PARIS)], save=True).saved is False  # nothing changed

    def test_the_async_twins_write_as_the_sync_methods(self, backend: Any) -> None:
        async def run() -> tuple[Any, ...]:
            w = writer(backend)
            report = await aingest(backend, [_doc(pair) for pair in DOCUMENTS], save=False)
            counted = await w.acount()
            removed = await w.adelete(_PARIS[0])
            return report.chunks, counted, removed, await w.acount()

        chunks, counted, removed, after = asyncio.run(run())
        assert chunks == counted and removed >= 1 and after == counted - removed

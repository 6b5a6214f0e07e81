"""The backend conformance suite (:mod:`selfrag_core.conformance`) against the embedded
store (in memory, and in a directory, whose ``save`` it exercises, lexical and hybrid),
the shipped fake, and a backend registered by URL scheme through an entry point (the
how-to's ``memo://``, ``docs/how-to/write-a-backend.md``). The Chroma server's run is in
``test_chroma_conformance.py``; the adapters' in their own test folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selfrag_core.conformance import BackendConformance
from selfrag_core.store import RAG
from selfrag_core.testing import FakeRetriever


class TestEmbeddedStoreInMemory(BackendConformance):
    saves = False  # no directory: save() says so

    @pytest.fixture
    def backend(self) -> RAG:
        return RAG()


class TestEmbeddedStoreInADirectory(BackendConformance):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> RAG:
        return RAG("hashing", path=tmp_path / "index", chunk_size=300, chunk_overlap=50)


class TestFakeRetriever(BackendConformance):
    @pytest.fixture
    def backend(self) -> FakeRetriever:
        return FakeRetriever()


def test_a_saved_directory_holds_what_was_ingested(tmp_path: Path) -> None:
    from selfrag_core.ingest import ingest

    rag = RAG(path=tmp_path / "index")
    ingest(rag, [{"text": "Paris is the capital of France.", "source": "fr.md"}], save=True)
    assert RAG.load(tmp_path / "index").sources().keys() == {"fr.md"}


def test_the_suite_catches_a_backend_that_breaks_the_contract() -> None:
    """The suite is honest: a backend whose delete forgets the count fails it."""

    class Forgetful(FakeRetriever):
        def delete(self, source: str) -> Any:
            super().delete(source)
            return 0

    suite = BackendConformance()
    with pytest.raises(AssertionError):
        suite.test_delete_removes_every_chunk_of_a_source(Forgetful())


def test_a_writer_reloads_what_another_process_saved(tmp_path: Path) -> None:
    # what each server worker asks before a query (serve/documents.py's sync)
    from selfrag_core.ingest import ingest, writer

    first = RAG(path=tmp_path / "index")
    ingest(first, [{"text": "Paris is the capital of France.", "source": "fr.md"}], save=True)
    w = writer(RAG.load(tmp_path / "index"))
    assert w.can_refresh and not w.changed_on_disk()
    ingest(first, [{"text": "The Nile flows north.", "source": "nile.md"}], save=True)
    assert w.changed_on_disk() and w.refresh() and not w.changed_on_disk()
    assert w.sources() == ["fr.md", "nile.md"] and w.texts_of("nile.md") == ["The Nile flows north."]
    fake = writer(FakeRetriever())
    assert not fake.can_refresh and not fake.changed_on_disk() and not fake.refresh()

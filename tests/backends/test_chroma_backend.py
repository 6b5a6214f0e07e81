"""ChromaBackend on a real Chroma server (``chroma run`` on loopback), with hashing
embeddings: writes are idempotent upserts, deletes go by source, scores are distances;
``open_backend`` opens it from a ``chroma://`` URL; the strategies and the HTTP service
run over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from selfrag_core import PlainRAG
from selfrag_core.backends.chroma import ChromaBackend, parse_url
from selfrag_core.errors import ConfigurationError
from selfrag_core.presets import open_backend
from selfrag_core.store import HashingEmbeddings
from selfrag_core.testing import FakeLLM
from selfrag_core.types import ScoreKind

pytestmark = pytest.mark.integration

PARIS = "Paris is the capital of France. The city lies on the river Seine."
BERLIN = "Berlin is the capital of Germany and its largest city."
NILE = "The Nile is the longest river in Africa and flows into the Mediterranean Sea."


@pytest.fixture
def backend(chroma_url: str) -> ChromaBackend:
    chroma = ChromaBackend.from_url(chroma_url, HashingEmbeddings())
    chroma.add_document(PARIS, {"source": "geo/paris.md", "lang": "en"})
    chroma.add_document(BERLIN, {"source": "geo/berlin.md", "lang": "de"})
    chroma.add_document(NILE, {"source": "rivers/nile.md", "lang": "en"})
    return chroma


def test_retrieve_returns_distances_with_source_and_metadata(backend: ChromaBackend) -> None:
    docs = backend.retrieve("What is the capital of France?", top_k=2)
    assert len(docs) == 2 and docs[0].text == PARIS
    assert all(d.score_kind is ScoreKind.DISTANCE for d in docs)
    assert docs[0].score is not None and docs[1].score is not None and docs[0].score <= docs[1].score
    assert docs[0].metadata.items() >= {"source": "geo/paris.md", "lang": "en", "chunk_index": 0}.items()
    assert docs[0].id and len(docs[0].id) == 64  # the chunk's SHA-256
    assert backend.count() == 3 and len(backend) == 3
    assert backend.stats()["chunks"] == 3 and backend.stats()["backend"] == "chroma"


def test_metadata_filter_becomes_where(backend: ChromaBackend) -> None:
    assert {d.metadata["source"] for d in backend.retrieve("capital", 5, {"lang": "de"})} == {"geo/berlin.md"}
    both = backend.retrieve("capital", 5, {"lang": "en", "source": ["geo/paris.md", "geo/berlin.md"]})
    assert [d.metadata["source"] for d in both] == ["geo/paris.md"]
    with pytest.raises(ConfigurationError, match="dict of metadata"):
        backend.retrieve("capital", 5, lambda meta: True)  # type: ignore[arg-type]


def test_the_same_document_twice_is_stored_once(backend: ChromaBackend) -> None:
    assert backend.add_document(PARIS, {"source": "geo/paris.md", "lang": "en"}) == 0
    assert backend.count() == 3
    # without a source: a content-derived one, so a retry is the same document too
    first = backend.add_documents([{"text": "Rome is the capital of Italy."}])
    again = backend.add_documents([{"text": "Rome is the capital of Italy."}])
    assert (first, again, backend.count()) == (1, 0, 4)


def test_a_changed_document_replaces_its_chunks(backend: ChromaBackend) -> None:
    backend.add_document("Paris is the capital and largest city of France.", {"source": "geo/paris.md"})
    texts = [d.text for d in backend.retrieve("capital of France", 5, {"source": "geo/paris.md"})]
    assert texts == ["Paris is the capital and largest city of France."] and backend.count() == 3


def test_long_documents_are_chunked_like_the_embedded_index(chroma_url: str) -> None:
    chroma = ChromaBackend.from_url(chroma_url, HashingEmbeddings(), chunk_size=100)
    text = "\n\n".join(f"Paragraph {i} tells about topic number {i} in a few words." for i in range(10))
    added = chroma.add_document(text, {"source": "long.md"})
    assert added == chroma.count() > 1
    assert chroma.add_document(text, {"source": "long.md"}) == 0 and chroma.count() == added


def test_delete_by_source(backend: ChromaBackend) -> None:
    assert backend.delete("geo/paris.md") == 1
    assert backend.delete("geo/paris.md") == 0
    assert backend.count() == 2
    assert all(d.metadata["source"] != "geo/paris.md" for d in backend.retrieve("France", 5))


def test_a_collection_keeps_its_embedder(backend: ChromaBackend, chroma_url: str) -> None:
    with pytest.raises(ConfigurationError, match="built with the embedder"):
        ChromaBackend.from_url(chroma_url, HashingEmbeddings(dim=64))
    assert ChromaBackend.from_url(chroma_url, HashingEmbeddings()).count() == 3


def test_a_strategy_answers_over_chroma(backend: ChromaBackend) -> None:
    llm = FakeLLM("Paris.")
    result = PlainRAG(backend, llm, top_k=2).query("What is the capital of France?")
    assert result.answer == "Paris."
    assert result.sources[0].metadata["source"] == "geo/paris.md"
    assert PARIS in llm.calls[0].prompt


def test_open_backend_opens_a_chroma_url(chroma_url: str) -> None:
    chroma = open_backend(chroma_url, embed="hashing")
    assert isinstance(chroma, ChromaBackend) and chroma.count() == 0
    with pytest.raises(ConfigurationError, match="searches vectors"):
        open_backend(chroma_url, embed="none")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("chroma://127.0.0.1/docs", "no port"),
        ("chroma://127.0.0.1:port/docs", "no valid port"),
        ("chroma://:8001/docs", "no host"),
        ("chroma://127.0.0.1:8001", "no collection"),
        ("chroma://127.0.0.1:8001/a/b", "one name"),
        ("chroma://127.0.0.1:8001/x", "not a Chroma collection name"),
        ("http://127.0.0.1:8001/docs", "not a chroma:// URL"),
    ],
)
def test_bad_urls_are_configuration_errors_with_an_example(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as caught:
        parse_url(url)
    assert "chroma://127.0.0.1:8001/docs" in str(caught.value)


def test_a_url_parses() -> None:
    assert parse_url("chroma://localhost:8001/my.docs-1") == ("localhost", 8001, "my.docs-1")


def test_an_unreachable_server_is_a_configuration_error() -> None:
    pytest.importorskip("chromadb")
    with pytest.raises(ConfigurationError, match="cannot reach the Chroma server"):
        ChromaBackend.from_url("chroma://127.0.0.1:9/docs", HashingEmbeddings())


# ----------------------------------------------------------------------------- the HTTP service


def test_the_service_writes_to_chroma_idempotently(chroma_url: str, tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from selfrag_core.serve import ServeSettings, create_app

    chroma = ChromaBackend.from_url(chroma_url, HashingEmbeddings())
    llm = FakeLLM("Rome.")
    app = create_app(
        rag=chroma, llm=llm, strategies={"plain": PlainRAG(chroma, llm, top_k=2)}, settings=ServeSettings()
    )
    doc = {"text": "Rome is the capital of Italy.", "source": "docs/italy.md", "metadata": {"lang": "it"}}
    with TestClient(app) as c:
        first = c.post("/documents", json=doc)
        assert first.status_code == 200, first.text
        assert first.json()["count"] == 1 and first.json()["persisted"] is False
        retried = c.post("/documents", json=doc)  # a retried write: no duplicate
        assert retried.status_code == 200 and retried.json()["count"] == 1 and retried.json()["chunks"] == 0
        sourceless = {"text": "Madrid is the capital of Spain."}
        assert c.post("/documents", json=sourceless).json()["count"] == 2
        assert c.post("/documents", json=sourceless).json()["count"] == 2
        assert c.get("/stats").json()["documents"] == 2

        answer = c.get("/query/plain", params={"q": "What is the capital of Italy?"}).json()
        assert answer["answer"] == "Rome."
        assert answer["sources"][0]["metadata"].items() >= {"source": "docs/italy.md", "lang": "it"}.items()
        assert answer["sources"][0]["score_kind"] == "distance"

        deleted = c.delete("/documents/docs/italy.md")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["deleted"] == 1 and deleted.json()["count"] == 1
        assert c.delete("/documents/docs/italy.md").status_code == 404
    assert chroma.count() == 1
    assert not any(tmp_path.iterdir())  # nothing saved locally


def test_a_backend_without_add_document_answers_501() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from selfrag_core.serve import ServeSettings, create_app

    class ReadOnly:
        def retrieve(self, query: str, top_k: int = 5) -> list[str]:
            return ["Rome is the capital of Italy."]

    retriever, llm = ReadOnly(), FakeLLM("Rome.")
    strategies = {"plain": PlainRAG(retriever, llm)}
    app = create_app(rag=retriever, llm=llm, strategies=strategies, settings=ServeSettings())
    with TestClient(app) as c:
        refused = c.post("/documents", json={"text": "Madrid is the capital of Spain."})
        assert refused.status_code == 501 and "add_document" in refused.json()["error"]["message"]


# ----------------------------------------------------------------------------- the command line


def test_the_cli_indexes_into_chroma_and_answers_from_it(
    chroma_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from selfrag_core import cli

    (tmp_path / "paris.md").write_text(PARIS, encoding="utf-8")
    (tmp_path / "nile.md").write_text(NILE, encoding="utf-8")
    index = ["index", str(tmp_path), "--backend", chroma_url, "--embedder", "hashing", "--plain"]
    assert cli.main(index) == 0
    assert "2 new chunk(s)" in capsys.readouterr().out
    assert cli.main(index) == 0  # again: nothing new, nothing duplicated
    again = capsys.readouterr().out
    assert "0 new chunk(s)" in again and "now holds 2 chunk(s)" in again
    # ask follows the collection's embedder (hashing), as it follows an index's manifest
    code = cli.main(["ask", "What is the capital of France?", "--backend", chroma_url, "--llm", "fake",
                     "--strategy", "plain", "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert '"source": "' + str((tmp_path / "paris.md").resolve()) in out.out
    assert ChromaBackend.from_url(chroma_url, HashingEmbeddings()).count() == 2


def test_the_cli_reports_a_bad_backend_in_its_style(capsys: pytest.CaptureFixture[str]) -> None:
    from selfrag_core import cli

    code = cli.main(["ask", "q", "--backend", "chroma://127.0.0.1/docs", "--llm", "fake"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("selfrag: error: ") and "names no port" in err


def test_serve_with_an_external_backend_keeps_no_index_directory(chroma_url: str) -> None:
    pytest.importorskip("fastapi")
    from selfrag_core.cli.commands import serve_app
    from selfrag_core.cli.parser import build_parser

    args = build_parser().parse_args(
        ["serve", "--backend", chroma_url, "--embedder", "hashing", "--llm", "fake", "--index", "ignored"]
    )
    app = serve_app(args)
    service = app.state.service
    assert isinstance(service.rag, ChromaBackend) and service.settings.index_dir is None
    assert service.store.index_dir is None  # no file lock, no save: each worker its own client

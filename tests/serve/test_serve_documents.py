"""Ingestion and deletion against the embedded store and any add_document backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import ScriptedLLM, Server, make_rag, serving

from selfrag_core import SelfIRAG
from selfrag_core.testing import FakeRetriever

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def persistent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    index_dir = tmp_path_factory.mktemp("index")
    rag = make_rag(index_dir)
    rag.save()
    with serving(rag, ScriptedLLM(), index_dir=str(index_dir), max_body_bytes=50_000) as server:
        yield server, index_dir


def _saved_sources(index_dir: Path) -> set[str]:
    from selfrag_core.store import RAG

    return set(RAG.load(index_dir).sources())


def test_add_query_delete_round_trip_persists(persistent: tuple[Server, Path]) -> None:
    server, index_dir = persistent
    with server.client() as c:
        before = c.get("/healthz").json()["documents"]
        added = c.post(
            "/documents",
            json={
                "text": "Rome is the capital of Italy.",
                "source": "docs/italy.md",
                "metadata": {"lang": "en"},
            },
        )
        assert added.status_code == 200, added.text
        body = added.json()
        assert body["sources"] == ["docs/italy.md"] and body["indexed"] == 1
        assert body["chunks"] == 1 and body["count"] == before + 1 and body["persisted"] is True
        assert "docs/italy.md" in _saved_sources(index_dir)

        answer = c.get("/query/self", params={"q": "What is the capital of Italy?"}).json()
        assert answer["sources"][0]["metadata"].items() >= {"source": "docs/italy.md", "lang": "en"}.items()

        deleted = c.delete("/documents/docs/italy.md")  # a source with a slash
        assert deleted.status_code == 200
        assert deleted.json() == {"source": "docs/italy.md", "deleted": 1, "count": before, "persisted": True}
        assert "docs/italy.md" not in _saved_sources(index_dir)
        again = c.delete("/documents/docs/italy.md")
        assert again.status_code == 404 and again.json()["error"]["type"] == "unknown_source"


def test_batch_and_generated_sources(persistent: tuple[Server, Path]) -> None:
    server, index_dir = persistent
    docs = [{"text": "Madrid is the capital of Spain."}, {"text": "Lisbon is the capital of Portugal."}]
    with server.client() as c:
        body = c.post("/documents", json={"documents": docs}).json()
        assert body["indexed"] == 2 and all(s.startswith("sha256:") for s in body["sources"])
        assert set(body["sources"]) <= _saved_sources(index_dir)
        for source in body["sources"]:
            assert c.delete(f"/documents/{source}").status_code == 200


BAD_DOCUMENTS = [
    ({"text": ""}, 400, "empty"),
    ({"text": "  \n "}, 400, "empty"),
    ({"text": "PK\x03\x04\x00\x00binary"}, 400, "binary"),
    ({"text": "\x01\x02\x03\x04\x05\x06\x07\x08 looks like a blob"}, 400, "binary"),
    ({"text": 5}, 422, "string"),
    ({"text": "ok", "metadata": {"nested": {"a": 1}}}, 422, "metadata"),
    ({"text": "ok", "source": ""}, 422, "source"),
    ({"documents": []}, 422, "documents"),
    ({"documents": [{"text": "fine text"}, {"text": ""}]}, 400, "empty"),
    ({"source": "no-text"}, 422, "text"),
]


@pytest.mark.parametrize(("payload", "status", "word"), BAD_DOCUMENTS)
def test_bad_documents_are_refused_and_nothing_is_lost(
    persistent: tuple[Server, Path], payload: object, status: int, word: str
) -> None:
    server, index_dir = persistent
    with server.client() as c:
        before = c.get("/healthz").json()["documents"]
        response = c.post("/documents", json=payload)
        assert response.status_code == status, response.text
        assert word in response.text.lower()
        assert c.get("/healthz").json()["documents"] == before
    assert {"france.txt", "germany.txt", "nile.txt"} <= _saved_sources(index_dir)


def test_binary_body_is_refused(persistent: tuple[Server, Path]) -> None:
    server, _ = persistent
    with server.client() as c:
        raw = c.post("/documents", content=bytes(range(256)), headers={"Content-Type": "application/json"})
        assert raw.status_code == 400
        octets = c.post(
            "/documents", content=b"\x00\x01", headers={"Content-Type": "application/octet-stream"}
        )
        assert octets.status_code in (400, 422) and "error" in octets.json()


class SpecBackend(FakeRetriever):
    """The specification's minimal backend: retrieve and add_document, nothing more."""

    add_documents = delete = count = sources = None  # type: ignore[assignment]


def test_any_add_document_backend_works_and_delete_is_501_without_support() -> None:
    backend = SpecBackend()
    with serving(backend, None, {"self": SelfIRAG(backend, ScriptedLLM())}) as server, server.client() as c:
        body = c.post("/documents", json={"text": "Paris is the capital of France.", "source": "fr"}).json()
        assert body["indexed"] == 1 and body["count"] is None and body["persisted"] is False
        assert backend.metadata == [{"source": "fr"}]
        answer = c.get("/query/self", params={"q": "capital of France?"}).json()
        assert answer["sources"][0]["text"] == "Paris is the capital of France."
        response = c.delete("/documents/fr")
        assert response.status_code == 501 and response.json()["error"]["type"] == "not_supported"
        assert c.get("/stats").json()["documents"] is None


def test_the_fake_backend_is_written_and_deleted_through_the_contract() -> None:
    backend = FakeRetriever()
    with serving(backend, None, {"self": SelfIRAG(backend, ScriptedLLM())}) as server, server.client() as c:
        body = c.post(
            "/documents", json={"text": "Paris is the capital of France.", "source": "/srv/fr.md"}
        ).json()
        assert body["indexed"] == 1 and body["chunks"] == 1 and body["count"] == 1
        lost = c.delete("/documents/srv/fr.md")  # the path route loses the leading slash
        assert (
            lost.status_code == 404
            and "DELETE /documents?source=/srv/fr.md" in lost.json()["error"]["message"]
        )
        gone = c.delete("/documents", params={"source": "/srv/fr.md"})
        assert gone.status_code == 200 and gone.json() == {
            "source": "/srv/fr.md", "deleted": 1, "count": 0, "persisted": False,
        }  # fmt: skip
        assert c.delete("/documents", params={"source": "/srv/fr.md"}).status_code == 404
        assert c.delete("/documents").status_code in (400, 422)  # no source

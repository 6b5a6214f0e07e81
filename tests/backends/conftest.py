"""A real Chroma server for the backend tests (``selfrag_core.testing.chroma_server``:
``chroma run`` on loopback, as the LangChain adapter's tests start it); skipped cleanly
when chromadb or its ``chroma`` executable is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from selfrag_core import testing


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(host, port) of a Chroma server started for the session and killed at its end
    (:func:`selfrag_core.testing.chroma_server`: every vector must come from the
    backend's embedder)."""
    pytest.importorskip("chromadb", reason="pip install 'selfrag[chroma]'")
    try:
        with testing.chroma_server(tmp_path_factory.mktemp("chroma")) as address:
            yield address
    except LookupError as e:
        pytest.skip(f"{e}")


@pytest.fixture
def chroma_url(chroma_server: tuple[str, int], request: pytest.FixtureRequest) -> str:
    """A ``chroma://`` URL of a collection of its own for each test."""
    host, port = chroma_server
    name = "t-" + "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[-40:].strip("-")
    return f"chroma://{host}:{port}/{name}0"

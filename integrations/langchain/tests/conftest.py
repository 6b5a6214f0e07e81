from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lc_fakes import RunTree

from selfrag_core.testing import chroma_server


@pytest.fixture
def run_tree() -> RunTree:
    return RunTree()


@pytest.fixture(scope="session")
def chroma_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Chroma server (:func:`selfrag_core.testing.chroma_server`) and an HttpClient
    to it; the server is killed at the end of the session."""
    chromadb = pytest.importorskip("chromadb", reason="pip install 'selfrag-langchain[chroma]'")
    pytest.importorskip("langchain_chroma", reason="pip install 'selfrag-langchain[chroma]'")
    from chromadb.config import Settings

    try:
        with chroma_server(tmp_path_factory.mktemp("chroma")) as (host, port):
            yield chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))
    except LookupError as e:
        pytest.skip(f"{e}")

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from lc_fakes import RunTree


def _backend_fixtures() -> Any:
    """The core's backend-test fixtures (``tests/backends/conftest.py``): its Chroma server
    and its rule for a missing one (``SELFRAG_CHROMA_TESTS=required`` fails instead of
    skipping), loaded from there, not copied."""
    path = Path(__file__).resolve().parents[3] / "tests" / "backends" / "conftest.py"
    spec = importlib.util.spec_from_file_location("selfrag_lc_tests_backends_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_backends = _backend_fixtures()
chroma_server = _backends.chroma_server


@pytest.fixture
def run_tree() -> RunTree:
    return RunTree()


@pytest.fixture(scope="session")
def chroma_client(chroma_server: tuple[str, int]) -> Any:
    """An HttpClient to the session's real Chroma server (``chroma_server``)."""
    if importlib.util.find_spec("langchain_chroma") is None:
        _backends.missing("langchain-chroma is not installed: pip install 'selfrag-langchain[chroma]'")
    import chromadb
    from chromadb.config import Settings

    host, port = chroma_server
    return chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))

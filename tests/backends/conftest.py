"""A real Chroma server for the backend tests (``selfrag_core.testing.chroma_server``:
``chroma run`` on loopback, as the LangChain adapter's tests start it, with this very
fixture). Skipped cleanly when chromadb or its ``chroma`` executable is not installed,
unless ``SELFRAG_CHROMA_TESTS=required`` (set by ``.ci/run``, which installs them): then
that is a failure, so the Chroma conformance run cannot be skipped unnoticed."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from selfrag_core import testing

REQUIRED = os.environ.get("SELFRAG_CHROMA_TESTS") == "required"


def missing(what: str) -> NoReturn:
    """Skip for ``what`` is missing, or fail under ``SELFRAG_CHROMA_TESTS=required``."""
    if REQUIRED:
        pytest.fail(f"{what} (SELFRAG_CHROMA_TESTS=required: .ci/run installs it)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(host, port) of a Chroma server started for the session and killed at its end
    (:func:`selfrag_core.testing.chroma_server`: every vector must come from the
    backend's embedder)."""
    if importlib.util.find_spec("chromadb") is None:
        missing("chromadb is not installed: pip install 'selfrag[chroma]'")
    try:
        with testing.chroma_server(tmp_path_factory.mktemp("chroma")) as address:
            yield address
    except LookupError as e:
        missing(str(e))


@pytest.fixture
def chroma_url(chroma_server: tuple[str, int], request: pytest.FixtureRequest) -> str:
    """A ``chroma://`` URL of a collection of its own for each test."""
    host, port = chroma_server
    name = "t-" + "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[-40:].strip("-")
    return f"chroma://{host}:{port}/{name}0"

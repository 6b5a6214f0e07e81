"""Session-wide real servers for the cross-process tests: the Chroma server of
``tests/backends/conftest.py`` (loaded from there, not copied) and llama-cpp-python's
OpenAI-compatible server over SmolLM2 (``servers.llama_server``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from selfrag_core.errors import MissingDependencyError

from .servers import LLAMA_SERVER_HINT, llama_server, missing_modules


def _backend_fixtures() -> object:
    path = Path(__file__).parents[1] / "backends" / "conftest.py"
    spec = importlib.util.spec_from_file_location("selfrag_tests_backends_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chroma_server = _backend_fixtures().chroma_server  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of llama-cpp-python's server over SmolLM2 (model alias ``smollm2``)."""
    missing = missing_modules()
    if missing:
        pytest.skip(f"the OpenAI-compatible model server needs {', '.join(missing)}: {LLAMA_SERVER_HINT}")
    try:
        with llama_server(tmp_path_factory.mktemp("llama")) as url:
            yield url
    except MissingDependencyError as e:
        pytest.skip(str(e))

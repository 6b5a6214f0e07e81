"""``SELFRAG_CHROMA_TESTS=required`` (set by ``.ci/run`` before its "all fast tests" step):
a missing chromadb, ``chroma`` executable or ``langchain-chroma`` fails the run instead of
skipping the Chroma server's conformance run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import testing

ROOT = Path(__file__).resolve().parents[2]


def _conftest() -> Any:
    spec = importlib.util.spec_from_file_location(
        "backends_conftest_under_test", Path(__file__).with_name("conftest.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_missing_chroma_is_skipped_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SELFRAG_CHROMA_TESTS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no chroma"):
        _conftest().missing("no chroma")
    monkeypatch.setenv("SELFRAG_CHROMA_TESTS", "required")
    with pytest.raises(pytest.fail.Exception, match=r"no chroma \(SELFRAG_CHROMA_TESTS=required"):
        _conftest().missing("no chroma")


def test_a_missing_executable_is_what_the_fixture_calls_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(testing, "chroma_executable", lambda: None)
    with pytest.raises(LookupError, match="pip install chromadb"), testing.chroma_server(tmp_path):
        pass


def test_ci_requires_the_chroma_run_before_the_fast_tests() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    required = script.index("export SELFRAG_CHROMA_TESTS=required")
    fast = script.index('pytest_run -q -m "not slow" tests integrations')
    assert script.index('step "all fast tests') < required < fast
    assert 'no_proxy="127.0.0.1,localhost' in script  # the loopback servers never through a proxy
